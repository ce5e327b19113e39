package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// RestoreOptions name what Restore reads and where it puts it.
type RestoreOptions struct {
	In       string // the archive
	StateDir string // target state dir: absent or empty, unless Force
	DSN      string // target PostgreSQL database (empty, unless Force); "" for SQLite in the state dir
	// Force restores over a non-empty state dir (moved aside, not
	// deleted) and database (its tables dropped).
	Force bool
	Log   *slog.Logger
}

// Restored says what Restore did.
type Restored struct {
	Manifest Manifest
	Store    store.Version // the store once opened by this binary (migrated)
	MovedTo  string        // where a replaced state dir went ("" if none)
}

// Restore verifies the archive whole (every member's sha256 against the
// manifest) before it changes anything, then loads the database, puts
// the state dir in place, and opens the store once with the restored key
// (which migrates an older schema to this binary's).
func Restore(ctx context.Context, o RestoreOptions) (*Restored, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.In == "" || o.StateDir == "" {
		return nil, errors.New("restore: --in and --state-dir are required")
	}
	target, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("restore: --state-dir %s: %w", o.StateDir, err)
	}
	occupied, err := checkTarget(target)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if occupied && !o.Force {
		return nil, fmt.Errorf("restore: state dir %s is not empty: restore into a new one, or pass --force to move it aside", target)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	staging, err := os.MkdirTemp(filepath.Dir(target), "."+filepath.Base(target)+".restore-")
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(staging)
	m, err := extractFile(o.In, staging)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", o.In, err)
	}
	if err := checkManifest(m, o.DSN, staging); err != nil {
		return nil, fmt.Errorf("restore %s: %w", o.In, err)
	}
	res := &Restored{Manifest: *m}
	if m.Database == Postgres {
		if err := restorePostgres(ctx, m, staging, o.DSN, o.Force); err != nil {
			return nil, fmt.Errorf("restore %s: %w", o.In, err)
		}
	} else if err := os.Rename(filepath.Join(staging, filepath.FromSlash(sqliteName)), filepath.Join(staging, "state", statedir.DBFile)); err != nil {
		return nil, fmt.Errorf("restore %s: %w", o.In, err)
	}
	if res.MovedTo, err = place(filepath.Join(staging, "state"), target, occupied); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if res.Store, err = openRestored(ctx, target, o.DSN); err != nil {
		return res, fmt.Errorf("restore: the restored store: %w", err)
	}
	return res, nil
}

func extractFile(in, dir string) (*Manifest, error) {
	f, err := os.Open(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Extract(f, dir, ExtractLimits{})
}

// checkManifest refuses an archive this binary cannot restore where asked.
func checkManifest(m *Manifest, dsn, staging string) error {
	if err := store.CheckNotNewer(store.Version{Schema: m.Schema, CUREVersion: m.StoreCUREVersion}); err != nil {
		return fmt.Errorf("the backup (written by CURE %s): %w", m.CUREVersion, err)
	}
	switch m.Database {
	case Postgres:
		if dsn == "" {
			return errors.New("the backup holds a PostgreSQL store: name the database to restore it into with --db")
		}
	case SQLite:
		if dsn != "" {
			return errors.New("the backup holds a SQLite store (restored into the state dir): drop --db")
		}
	}
	if _, err := os.Stat(filepath.Join(staging, "state", statedir.KeyFile)); err != nil {
		return fmt.Errorf("the backup has no state/%s: its sealed secrets could not be read", statedir.KeyFile)
	}
	return nil
}

// checkTarget refuses a state dir a coordinator holds, and reports
// whether it has anything in it.
func checkTarget(dir string) (occupied bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state dir %s: %w", dir, err)
	}
	if f, err := os.Open(filepath.Join(dir, statedir.LockFile)); err == nil {
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
			return true, fmt.Errorf("state dir %s is in use by a running coordinator: stop it first", dir)
		}
	}
	return len(entries) > 0, nil
}

// place moves the staged state dir to target; an occupied target is
// renamed aside first (target.replaced-TIME), never deleted.
func place(staged, target string, occupied bool) (movedTo string, err error) {
	if occupied {
		movedTo = target + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(target, movedTo); err != nil {
			return "", fmt.Errorf("move %s aside: %w", target, err)
		}
	} else if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("state dir %s: %w", target, err)
	}
	if err := os.Rename(staged, target); err != nil {
		return movedTo, fmt.Errorf("state dir %s: %w", target, err)
	}
	return movedTo, os.Chmod(target, 0o700)
}

// openRestored opens the restored store with the restored key: it
// migrates an older schema, and proves the key and the database belong
// together before a coordinator starts on them.
func openRestored(ctx context.Context, dir, dsn string) (store.Version, error) {
	key, err := os.ReadFile(filepath.Join(dir, statedir.KeyFile))
	if err != nil {
		return store.Version{}, err
	}
	if dsn == "" {
		dsn = filepath.Join(dir, statedir.DBFile)
	}
	st, err := store.OpenDSN(dsn, store.WithStateKey(key))
	if err != nil {
		return store.Version{}, err
	}
	defer st.Close()
	if _, err := st.ListNodes(ctx); err != nil {
		return store.Version{}, err
	}
	return st.Version(ctx)
}
