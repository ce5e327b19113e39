package store

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// A store records the schema version and the CURE that migrated it; one
// whose schema is newer than this binary's is refused, naming the store's
// CURE version and schema number and this binary's, and left untouched.
func TestRefuseNewerStore(t *testing.T) {
	ctx := ctxT(t)
	newer := SchemaVersion + 1
	check := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, ErrNewerStore) {
			t.Fatalf("opening a newer store: %v, want ErrNewerStore", err)
		}
		for _, want := range []string{"CURE v9.9.9", fmt.Sprintf("schema version %d", newer),
			"CURE " + CUREVersion(), fmt.Sprintf("schema version %d", SchemaVersion)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not name %q", err, want)
			}
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cure.db")
		st, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := st.Version(ctx)
		if err != nil || v.Schema != SchemaVersion || v.CUREVersion != CUREVersion() || v.MigratedAt.IsZero() {
			t.Fatalf("recorded version %+v %v, want schema %d by %q", v, err, SchemaVersion, CUREVersion())
		}
		st.Close()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		// What a newer binary leaves: one more migration, its version recorded.
		for _, q := range []string{fmt.Sprintf(`PRAGMA user_version = %d`, newer),
			fmt.Sprintf(`UPDATE store_version SET schema_version = %d, cure_version = 'v9.9.9'`, newer)} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		_, err = Open(path)
		check(t, err)
		db, _ = sql.Open("sqlite", path)
		defer db.Close()
		if v, err := ReadVersion(ctx, db, false); err != nil || v.Schema != newer || v.CUREVersion != "v9.9.9" {
			t.Fatalf("the refused store was changed: %+v %v", v, err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Shared(t).NewDatabase(t)
		st, err := OpenDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := st.Version(ctx); err != nil || v.Schema != SchemaVersion || v.CUREVersion != CUREVersion() {
			t.Fatalf("recorded version %+v %v", v, err)
		}
		st.Close()
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `UPDATE schema_version SET version = $1`, newer); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE store_version SET schema_version = $1, cure_version = 'v9.9.9'`, newer); err != nil {
			t.Fatal(err)
		}
		_, err = OpenDSN(dsn)
		check(t, err)
	})
}

// A store an earlier binary made has no version record: it reads as its
// schema alone, and the first open records this binary.
func TestVersionRecordedOnUpgrade(t *testing.T) {
	ctx := ctxT(t)
	db := openSQLiteAt(t, SchemaVersion-1)
	v, err := ReadVersion(ctx, db, false)
	if err != nil || v.Schema != SchemaVersion-1 || v.CUREVersion != "" {
		t.Fatalf("an unrecorded store reads %+v %v", v, err)
	}
	if err := checkNotNewerDB(ctx, db, false); err != nil {
		t.Fatal(err)
	}
}
