package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/runsignal"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// The store speaks one SQL to two databases: SQLite (embedded, the default)
// and PostgreSQL (several coordinator instances on one database). Queries
// are written with ? placeholders and identifiers both accept; the dialect
// rebinds placeholders and supplies the few expressions that differ.
type dialect struct {
	name string
	// rebind turns ? placeholders into the database's own.
	rebind func(string) string
	// jsonElements is a table expression of the text elements of a JSON
	// array column, each as a row with column "value".
	jsonElements func(col string) string
}

var sqliteDialect = dialect{name: "sqlite", rebind: func(q string) string { return q },
	jsonElements: func(col string) string { return "json_each(" + col + ")" }}

var postgresDialect = dialect{name: "postgres", rebind: rebindDollar,
	jsonElements: func(col string) string { return "json_array_elements_text(" + col + "::json)" }}

// rebindDollar turns ? into $1, $2... outside quoted strings and identifiers.
func rebindDollar(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// IsPostgresDSN reports whether dsn names a PostgreSQL database
// (postgres:// or postgresql:// URL, or a key=value string with host= or dbname=).
func IsPostgresDSN(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return true
	}
	return strings.Contains(dsn, "=") && (strings.Contains(dsn, "host=") || strings.Contains(dsn, "dbname="))
}

// OpenDSN opens PostgreSQL for a postgres DSN (see IsPostgresDSN) and
// otherwise SQLite at the path ("sqlite:" or "file:" prefixes allowed).
func OpenDSN(dsn string, opts ...Option) (*Store, error) {
	if IsPostgresDSN(dsn) {
		return openPostgres(dsn, opts...)
	}
	dsn = strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "file:")
	return Open(dsn, opts...)
}

// Redacted is the DSN without its password, for logs and errors.
func Redacted(dsn string) string {
	if i := strings.Index(dsn, "password="); i >= 0 {
		j := strings.IndexAny(dsn[i:], " &")
		if j < 0 {
			return dsn[:i] + "password=xxx"
		}
		return dsn[:i] + "password=xxx" + dsn[i+j:]
	}
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if c := strings.Index(dsn, "://"); c > 0 {
			if colon := strings.Index(dsn[c+3:at], ":"); colon >= 0 {
				return dsn[:c+3+colon] + ":xxx" + dsn[at:]
			}
		}
	}
	return dsn
}

func openPostgres(dsn string, opts ...Option) (*Store, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	var seal *sealer
	var err error
	if o.stateKey != nil {
		if seal, err = newSealer(o.stateKey); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
	}
	// Writes still go through one committer (group commit); the other
	// connections serve reads and statement preparation.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
	}
	if err := checkNotNewerDB(ctx, db, true); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
	}
	if err := migratePostgres(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
	}
	if err := recordVersion(ctx, db, postgresDialect); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redacted(dsn), err)
	}
	st := &Store{path: Redacted(dsn), w: db, r: newPool(db), wp: newPool(db), sealer: seal, signals: runsignal.New(),
		instance: o.instance, leaseTTL: o.leaseTTL, runCache: map[string]cachedRow{}, dialect: postgresDialect, maxNotes: o.notes(),
		maxMeasurements: o.measurements()}
	st.r.rebind, st.wp.rebind = rebindDollar, rebindDollar
	if st.leaseTTL <= 0 {
		st.leaseTTL = DefaultLeaseTTL
	}
	maxBatch := 256
	if o.noGroupCommit {
		maxBatch = 1
	}
	st.gc = newCommitter(db, st.wp, maxBatch)
	return st, nil
}

// pgMigrationLock is the advisory lock two instances starting at once
// serialise their migrations on.
const pgMigrationLock = 0x43555245 // "CURE"

func migratePostgres(ctx context.Context, db *sql.DB) error {
	return migratePostgresTo(ctx, db, len(migrations))
}

// migratePostgresTo applies the migrations up to schema version target
// (tests build databases of older versions with it).
func migratePostgresTo(ctx context.Context, db *sql.DB, target int) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgMigrationLock); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pgMigrationLock)
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("schema_version: %w", err)
	}
	var v int
	err = conn.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this provisioner-lite (%d): refusing to run an older binary on it", v, len(migrations))
	}
	for i := v; i < target; i++ {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[i].render(postgresDialect)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if step := migrationSteps[i+1]; step != nil {
			if err := step(ctx, tx, rebindDollar); err != nil {
				tx.Rollback()
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = $1`, i+1); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	return nil
}
