package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// The one list builds the same schema on both databases: the same tables,
// columns (name, order, type class, nullability, key, default) and indexes.
func TestOneMigrationList(t *testing.T) {
	ctx := ctxT(t)
	lite := openSQLiteAt(t, len(migrations))
	pg := openPostgresAt(t, len(migrations))
	a, b := sqliteSchema(t, lite, false), postgresSchema(t, pg, false)
	if diff := schemaDiff(a, b); diff != "" {
		t.Fatalf("SQLite and PostgreSQL schemas differ (- SQLite, + PostgreSQL):\n%s", diff)
	}
	if len(a) < 100 {
		t.Fatalf("schema read back as %d lines: the comparison compared nothing", len(a))
	}
	var lv, pv int
	if err := lite.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&lv); err != nil {
		t.Fatal(err)
	}
	if err := pg.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&pv); err != nil {
		t.Fatal(err)
	}
	if lv != SchemaVersion || pv != SchemaVersion {
		t.Fatalf("schema versions: SQLite %d, PostgreSQL %d, want %d", lv, pv, SchemaVersion)
	}
}

var unrendered = regexp.MustCompile(`\{[a-z]+\}`)

// Every migration renders to SQL without a placeholder left over, and the
// numbering the earlier two lists had is kept (a database stores its
// version as a count of migrations applied).
func TestMigrationsRender(t *testing.T) {
	if len(legacySQLiteMigrations) != len(legacyPostgresMigrations) || len(migrations) < len(legacySQLiteMigrations) {
		t.Fatalf("%d migrations, %d/%d before they were one list", len(migrations), len(legacySQLiteMigrations), len(legacyPostgresMigrations))
	}
	if pipelineSchema != 11 {
		t.Fatalf("pipelineSchema moved to %d: migrations were renumbered", pipelineSchema)
	}
	for i, m := range migrations {
		for _, d := range []dialect{sqliteDialect, postgresDialect} {
			q := m.render(d)
			if strings.TrimSpace(q) == "" {
				t.Errorf("migration %d renders empty on %s", i+1, d.name)
			}
			if p := unrendered.FindString(q); p != "" {
				t.Errorf("migration %d on %s: placeholder %s left", i+1, d.name, p)
			}
		}
	}
}

// A database an earlier binary built with the two lists, stopped at any
// version, migrates forward with the one list to exactly the schema the
// earlier lists built (every detail each database reports), on both.
func TestMigrationsMatchLegacy(t *testing.T) {
	ctx := ctxT(t)
	n := len(legacySQLiteMigrations)
	t.Run("sqlite", func(t *testing.T) {
		want := sqliteSchema(t, legacySQLiteAt(t, n), true)
		for k := 0; k <= n; k++ {
			db := legacySQLiteAt(t, k)
			if err := migrateTo(ctx, db, n); err != nil {
				t.Fatalf("from legacy version %d: %v", k, err)
			}
			if diff := schemaDiff(want, sqliteSchema(t, db, true)); diff != "" {
				t.Fatalf("from legacy version %d (- legacy, + migrated):\n%s", k, diff)
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		want := postgresSchema(t, legacyPostgresAt(t, n), true)
		for k := 0; k <= n; k++ {
			db := legacyPostgresAt(t, k)
			if err := migratePostgresTo(ctx, db, n); err != nil {
				t.Fatalf("from legacy version %d: %v", k, err)
			}
			if diff := schemaDiff(want, postgresSchema(t, db, true)); diff != "" {
				t.Fatalf("from legacy version %d (- legacy, + migrated):\n%s", k, diff)
			}
		}
	})
}

func openSQLiteAt(t *testing.T, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrateTo(ctxT(t), db, version); err != nil {
		t.Fatal(err)
	}
	return db
}

func openPostgresAt(t *testing.T, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.Shared(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migratePostgresTo(ctxT(t), db, version); err != nil {
		t.Fatal(err)
	}
	return db
}

// legacySQLiteAt is a SQLite database the earlier list built to version.
func legacySQLiteAt(t *testing.T, version int) *sql.DB {
	t.Helper()
	db := openSQLiteAt(t, 0)
	applyLegacy(t, db, legacySQLiteMigrations[:version], sqliteDialect.rebind, func(tx *sql.Tx, v int) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v))
		return err
	})
	return db
}

// legacyPostgresAt is a PostgreSQL database the earlier list built to version.
func legacyPostgresAt(t *testing.T, version int) *sql.DB {
	t.Helper()
	db := openPostgresAt(t, 0)
	applyLegacy(t, db, legacyPostgresMigrations[:version], rebindDollar, func(tx *sql.Tx, v int) error {
		_, err := tx.Exec(`UPDATE schema_version SET version = $1`, v)
		return err
	})
	return db
}

func applyLegacy(t *testing.T, db *sql.DB, list []string, rebind func(string) string, setVersion func(*sql.Tx, int) error) {
	t.Helper()
	ctx := ctxT(t)
	for i, q := range list {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("legacy migration %d: %v", i+1, err)
		}
		if step := migrationSteps[i+1]; step != nil {
			if err := step(ctx, tx, rebind); err != nil {
				t.Fatalf("legacy migration %d: %v", i+1, err)
			}
		}
		if err := setVersion(tx, i+1); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// typeClass is what a column's declared type stores, the same on both
// databases: INTEGER, BIGINT and BOOLEAN are integers.
func typeClass(declared string) string {
	switch strings.ToLower(declared) {
	case "integer", "bigint", "boolean":
		return "int"
	case "real", "double precision":
		return "real"
	case "blob", "bytea":
		return "blob"
	case "text":
		return "text"
	}
	return "?" + declared
}

// normDefault writes a column default the same on both databases.
func normDefault(d sql.NullString) string {
	s := strings.TrimSuffix(d.String, "::text")
	if s == "false" {
		s = "0"
	}
	return s
}

var checkClause = regexp.MustCompile(`CHECK\s*\(([^()]*\([^()]*\)[^()]*)\)`)

// sqliteSchema describes db's schema as sorted lines; full adds what only
// SQLite reports (declared types, foreign keys, checks, partial indexes).
func sqliteSchema(t *testing.T, db *sql.DB, full bool) []string {
	t.Helper()
	var out []string
	tables := queryStrings(t, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	for _, tb := range tables {
		out = append(out, "table "+tb)
		rows := queryRows(t, db, fmt.Sprintf(`SELECT cid, name, type, "notnull", dflt_value, pk FROM pragma_table_info('%s')`, tb))
		for _, r := range rows {
			typ, notnull := typeClass(r[2].String), r[3].String == "1" || r[5].String != "0"
			if full {
				typ, notnull = r[2].String, r[3].String == "1"
			}
			out = append(out, fmt.Sprintf("column %s.%s #%s %s notnull=%v pk=%s default=%s", tb, r[1].String, r[0].String, typ, notnull, r[5].String, normDefault(r[4])))
		}
		for _, r := range queryRows(t, db, fmt.Sprintf(`SELECT name, "unique", origin, partial FROM pragma_index_list('%s')`, tb)) {
			if r[2].String != "c" && !full {
				continue // the index of a key: PostgreSQL's has another name
			}
			cols := queryStrings(t, db, fmt.Sprintf(`SELECT name FROM pragma_index_info('%s') ORDER BY seqno`, r[0].String))
			line := fmt.Sprintf("index %s on %s(%s) unique=%v partial=%v", r[0].String, tb, strings.Join(cols, ","), r[1].String == "1", r[3].String == "1")
			if full && r[3].String == "1" {
				def := queryStrings(t, db, fmt.Sprintf(`SELECT sql FROM sqlite_master WHERE name = '%s'`, r[0].String))
				line += " " + strings.Join(strings.Fields(def[0][strings.Index(def[0], "WHERE"):]), " ")
			}
			out = append(out, line)
		}
		if !full {
			continue
		}
		for _, r := range queryRows(t, db, fmt.Sprintf(`SELECT "table", "from", "to", on_delete FROM pragma_foreign_key_list('%s')`, tb)) {
			out = append(out, fmt.Sprintf("fk %s.%s -> %s(%s) on delete %s", tb, r[1].String, r[0].String, r[2].String, r[3].String))
		}
		def := queryStrings(t, db, fmt.Sprintf(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '%s'`, tb))
		for _, m := range checkClause.FindAllStringSubmatch(def[0], -1) {
			out = append(out, fmt.Sprintf("check %s %s", tb, m[1]))
		}
	}
	slices.Sort(out)
	return out
}

// postgresSchema describes db's schema as sorted lines; full adds what only
// PostgreSQL reports (declared types, identity, every constraint and index
// definition). runs.rowid, SQLite's implicit rowid made explicit, is left
// out of the comparable form, and column positions renumbered around it.
func postgresSchema(t *testing.T, db *sql.DB, full bool) []string {
	t.Helper()
	var out []string
	tables := queryStrings(t, db, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> 'schema_version'`)
	for _, tb := range tables {
		out = append(out, "table "+tb)
		pk := queryStrings(t, db, `SELECT a.attname FROM pg_index ix JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = ANY(ix.indkey)
			WHERE ix.indrelid = $1::regclass AND ix.indisprimary ORDER BY array_position(ix.indkey, a.attnum)`, tb)
		rows := queryRows(t, db, `SELECT ordinal_position, column_name, data_type, is_nullable, column_default, is_identity
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, tb)
		shift := 0
		for _, r := range rows {
			name := r[1].String
			if !full && tb == "runs" && name == "rowid" {
				shift = 1
				continue
			}
			var pos int
			fmt.Sscan(r[0].String, &pos)
			typ := typeClass(r[2].String)
			if full {
				typ = r[2].String + " identity=" + r[5].String
			}
			out = append(out, fmt.Sprintf("column %s.%s #%d %s notnull=%v pk=%d default=%s", tb, name, pos-1-shift, typ, r[3].String == "NO", slices.Index(pk, name)+1, normDefault(r[4])))
		}
	}
	for _, r := range queryRows(t, db, `SELECT i.relname, t.relname, ix.indisunique, ix.indpred IS NOT NULL, pg_get_indexdef(ix.indexrelid),
			array_to_string(array(SELECT a.attname FROM unnest(ix.indkey) WITH ORDINALITY k(n, o)
				JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.n ORDER BY k.o), ',')
		FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = 'public' AND t.relname <> 'schema_version' AND (NOT EXISTS (SELECT 1 FROM pg_constraint c
			WHERE c.conindid = ix.indexrelid AND c.conrelid = t.oid AND c.contype IN ('p', 'u')) OR $1)`, full) {
		line := fmt.Sprintf("index %s on %s(%s) unique=%v partial=%v", r[0].String, r[1].String, r[5].String, r[2].String == "true", r[3].String == "true")
		if full {
			line += " " + r[4].String
		}
		out = append(out, line)
	}
	if full {
		for _, r := range queryRows(t, db, `SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
			FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public'`) {
			out = append(out, fmt.Sprintf("constraint %s %s %s", r[0].String, r[1].String, r[2].String))
		}
	}
	slices.Sort(out)
	return out
}

func queryRows(t *testing.T, db *sql.DB, q string, args ...any) [][]sql.NullString {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]sql.NullString
	for rows.Next() {
		r := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range r {
			ptrs[i] = &r[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	var out []string
	for _, r := range queryRows(t, db, q, args...) {
		out = append(out, r[0].String)
	}
	return out
}

// schemaDiff lists the lines only a has (-) and only b has (+).
func schemaDiff(a, b []string) string {
	var d []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			d = append(d, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			d = append(d, "+ "+l)
		}
	}
	return strings.Join(d, "\n")
}

// The two migration lists as they stood before they became one list
// (migrations, rendered per dialect), frozen in testdata:
// TestMigrationsMatchLegacy builds databases with them, at every version,
// and migrates them forward with the one list, so a database an older
// binary created keeps working. Never edit them; a new migration goes only
// in migrations.
var (
	legacySQLiteMigrations   = readLegacyMigrations("sqlite")
	legacyPostgresMigrations = readLegacyMigrations("postgres")
)

// legacyMarker opens each migration of a frozen list, numbered from 1.
const legacyMarker = "-- cure:migration "

// readLegacyMigrations reads testdata/legacy-migrations-DIALECT.sql: its
// migrations in order, each the text after its marker line.
func readLegacyMigrations(dialect string) []string {
	raw, err := os.ReadFile(filepath.Join("testdata", "legacy-migrations-"+dialect+".sql"))
	if err != nil {
		panic(err)
	}
	// Each migration is followed by one newline of the file's own.
	parts := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n"+legacyMarker)
	var out []string
	for i, p := range parts[1:] {
		num, body, ok := strings.Cut(p, "\n")
		if !ok || num != strconv.Itoa(i+1) {
			panic(fmt.Sprintf("legacy-migrations-%s.sql: migration %d is numbered %q", dialect, i+1, num))
		}
		out = append(out, body)
	}
	return out
}
