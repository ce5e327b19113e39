package backup

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// notDumped are the tables that describe the schema rather than hold
// data: a restore builds them by migrating to the dump's version.
var notDumped = []string{"schema_version", "store_version"}

// pgIdent quotes a PostgreSQL identifier.
func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// withPgConn runs fn on the pgx connection under c (COPY needs it).
func withPgConn(c *sql.Conn, fn func(*pgconn.PgConn) error) error {
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("not a pgx connection (%T)", dc)
		}
		return fn(sc.Conn().PgConn())
	})
}

// dumpPostgres dumps every table of the store's schema inside one
// REPEATABLE READ, READ ONLY transaction: one snapshot for all tables.
// Each table is COPY's text format, in an order that loads parents
// before the rows that reference them.
func dumpPostgres(ctx context.Context, w *writer, dsn, tmp string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", store.Redacted(dsn), err)
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect %s: %w", store.Redacted(dsn), err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`); err != nil {
		return fmt.Errorf("%s: begin: %w", store.Redacted(dsn), err)
	}
	defer c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
	v, err := store.ReadVersion(ctx, c, true)
	if err != nil {
		return err
	}
	if v.Schema == 0 {
		return fmt.Errorf("%s holds no CURE store (schema version 0)", store.Redacted(dsn))
	}
	w.m.Database, w.m.Schema, w.m.StoreCUREVersion = Postgres, v.Schema, v.CUREVersion
	tables, err := loadOrder(ctx, c)
	if err != nil {
		return err
	}
	if err := w.addDir(dbPrefix[:len(dbPrefix)-1], w.m.Created); err != nil {
		return err
	}
	if err := w.addDir(pgPrefix[:len(pgPrefix)-1], w.m.Created); err != nil {
		return err
	}
	for i, name := range tables {
		cols, err := columns(ctx, c, name)
		if err != nil {
			return err
		}
		member := fmt.Sprintf("%s%03d-%s.copy", pgPrefix, i, name)
		spool := filepath.Join(tmp, fmt.Sprintf("%03d.copy", i))
		if err := copyOut(ctx, c, name, cols, spool); err != nil {
			return err
		}
		if err := w.addPath(member, spool); err != nil {
			return err
		}
		os.Remove(spool)
		w.m.Tables = append(w.m.Tables, Table{Name: name, Columns: cols, Member: member})
	}
	return nil
}

// copyOut writes table's rows (COPY text format) to the file at p.
func copyOut(ctx context.Context, c *sql.Conn, table string, cols []string, p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = withPgConn(c, func(pc *pgconn.PgConn) error {
		_, err := pc.CopyTo(ctx, f, fmt.Sprintf(`COPY %s (%s) TO STDOUT`, pgIdent(table), quoteAll(cols)))
		return err
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dump table %s: %w", table, err)
	}
	return nil
}

func quoteAll(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgIdent(c)
	}
	return strings.Join(q, ", ")
}

// loadOrder lists the schema's tables (but notDumped), each after the
// tables its foreign keys reference.
func loadOrder(ctx context.Context, c *sql.Conn) ([]string, error) {
	rows, err := c.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var all []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		if !slices.Contains(notDumped, n) {
			all = append(all, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	rows, err = c.QueryContext(ctx, `SELECT src.relname, dst.relname FROM pg_constraint k
JOIN pg_class src ON src.oid = k.conrelid JOIN pg_class dst ON dst.oid = k.confrelid
JOIN pg_namespace n ON n.oid = src.relnamespace
WHERE k.contype = 'f' AND n.nspname = current_schema()`)
	if err != nil {
		return nil, fmt.Errorf("list foreign keys: %w", err)
	}
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			rows.Close()
			return nil, err
		}
		if a != b {
			deps[a] = append(deps[a], b)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return topoSort(all, deps)
}

// topoSort orders names so that each comes after its deps.
func topoSort(names []string, deps map[string][]string) ([]string, error) {
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string) error
	visit = func(n string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("foreign keys form a cycle through table %s", n)
		case 2:
			return nil
		}
		state[n] = 1
		for _, d := range deps[n] {
			if slices.Contains(names, d) {
				if err := visit(d); err != nil {
					return err
				}
			}
		}
		state[n] = 2
		out = append(out, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func columns(ctx context.Context, c *sql.Conn, table string) ([]string, error) {
	rows, err := c.QueryContext(ctx, `SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		cols = append(cols, n)
	}
	if len(cols) == 0 && rows.Err() == nil {
		return nil, fmt.Errorf("table %s has no columns", table)
	}
	return cols, rows.Err()
}

// pgTables lists the tables of the DSN's schema (a restore's emptiness check).
func pgTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// restorePostgres loads the dump in dir into the database at dsn: the
// schema migrated to the dump's version, every table copied in one
// transaction, the identity sequences moved past the restored ids.
// Opening the store afterwards migrates it the rest of the way.
func restorePostgres(ctx context.Context, m *Manifest, dir, dsn string, force bool) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", store.Redacted(dsn), err)
	}
	defer db.Close()
	tables, err := pgTables(ctx, db)
	if err != nil {
		return fmt.Errorf("%s: %w", store.Redacted(dsn), err)
	}
	if len(tables) > 0 {
		if !force {
			return fmt.Errorf("database %s is not empty (%d tables: %s...): restore into an empty database, or pass --force to drop its tables",
				store.Redacted(dsn), len(tables), tables[0])
		}
		for _, t := range tables {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+pgIdent(t)+` CASCADE`); err != nil {
				return fmt.Errorf("--force: drop %s: %w", t, err)
			}
		}
	}
	if err := store.MigratePostgresTo(ctx, db, m.Schema); err != nil {
		return err
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN`); err != nil {
		return err
	}
	if err := loadTables(ctx, c, m, dir); err != nil {
		c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("restore commit: %w", err)
	}
	return nil
}

func loadTables(ctx context.Context, c *sql.Conn, m *Manifest, dir string) error {
	for _, t := range m.Tables {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(t.Member)))
		if err != nil {
			return err
		}
		err = withPgConn(c, func(pc *pgconn.PgConn) error {
			_, err := pc.CopyFrom(ctx, f, fmt.Sprintf(`COPY %s (%s) FROM STDIN`, pgIdent(t.Name), quoteAll(t.Columns)))
			return err
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("restore table %s: %w", t.Name, err)
		}
		if err := resetIdentities(ctx, c, t.Name); err != nil {
			return err
		}
	}
	return nil
}

// resetIdentities moves table's identity sequences past its restored ids
// (COPY writes the ids without drawing from them).
func resetIdentities(ctx context.Context, c *sql.Conn, table string) error {
	rows, err := c.QueryContext(ctx, `SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1 AND is_identity = 'YES'`, table)
	if err != nil {
		return fmt.Errorf("identity columns of %s: %w", table, err)
	}
	var cols []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, n)
	}
	rows.Close()
	for _, col := range cols {
		q := fmt.Sprintf(`SELECT setval(pg_get_serial_sequence($1, $2), COALESCE((SELECT max(%s) FROM %s), 0) + 1, false)`, pgIdent(col), pgIdent(table))
		if _, err := c.ExecContext(ctx, q, pgIdent(table), col); err != nil {
			return fmt.Errorf("identity %s.%s: %w", table, col, err)
		}
	}
	return rows.Err()
}
