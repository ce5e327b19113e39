package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Options name what Backup copies.
type Options struct {
	StateDir string // the coordinator's state dir (read while it runs, without its lock)
	DSN      string // PostgreSQL DSN; "" for the SQLite store in the state dir
	Out      string // archive to create (0600; refused if it exists)
	Log      *slog.Logger
}

// Summary is what a backup wrote.
type Summary struct {
	Manifest Manifest
	Bytes    int64 // archive size
}

func cureVersion() string { return store.CUREVersion() }

// skipped are state dir files a backup leaves out: the lock (the running
// coordinator's), and the live SQLite files (the snapshot replaces them).
var skipped = map[string]bool{statedir.LockFile: true, statedir.DBFile: true, statedir.DBFile + "-wal": true,
	statedir.DBFile + "-shm": true, statedir.DBFile + "-journal": true}

// Backup writes an online, consistent copy of the coordinator's store and
// state dir to o.Out. It takes no lock: the coordinator keeps running.
// The database snapshot is consistent in itself; the state dir's files
// are copied as they are (they change rarely, and each is replaced whole).
func Backup(ctx context.Context, o Options) (*Summary, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.StateDir == "" || o.Out == "" {
		return nil, errors.New("backup: --state-dir and --out are required")
	}
	st, err := os.Stat(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("backup: state dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("backup: state dir %s is not a directory", o.StateDir)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, fmt.Errorf("backup: --out %s: %w", o.Out, err)
	}
	// Staging (the database snapshot) beside the archive, private.
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".cure-backup-")
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	f, err := os.OpenFile(out+".partial", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	sum, err := write(ctx, o, f, tmp)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if _, serr := os.Stat(out); serr == nil {
			err = fmt.Errorf("backup: %s exists: choose another --out", out)
		} else {
			err = os.Rename(out+".partial", out)
		}
	}
	if err != nil {
		os.Remove(out + ".partial")
		return nil, err
	}
	if fi, err := os.Stat(out); err == nil {
		sum.Bytes = fi.Size()
	}
	return sum, nil
}

// write is Backup's archive, streamed to f.
func write(ctx context.Context, o Options, f *os.File, tmp string) (*Summary, error) {
	if _, err := os.Stat(o.Out); err == nil {
		return nil, fmt.Errorf("backup: %s exists: choose another --out", o.Out)
	}
	w, err := newWriter(f)
	if err != nil {
		return nil, err
	}
	w.m.CUREVersion, w.m.Created = cureVersion(), time.Now().UTC().Truncate(time.Second)
	// The database first: its snapshot is the moment the backup stands for.
	if o.DSN == "" {
		err = snapshotSQLite(ctx, w, filepath.Join(o.StateDir, statedir.DBFile), tmp)
	} else {
		err = dumpPostgres(ctx, w, o.DSN, tmp)
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := addStateDir(w, o.StateDir, o.Log); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := w.close(); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return &Summary{Manifest: w.m}, nil
}

// snapshotSQLite copies the live database with VACUUM INTO: one read
// transaction, so the copy is consistent while the coordinator writes.
func snapshotSQLite(ctx context.Context, w *writer, dbPath, tmp string) error {
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("the SQLite store: %w (a PostgreSQL store needs --db)", err)
	}
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	defer db.Close()
	snap := filepath.Join(tmp, "cure.db")
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, snap); err != nil {
		return fmt.Errorf("snapshot %s: %w", dbPath, err)
	}
	sdb, err := sql.Open("sqlite", "file:"+(&url.URL{Path: snap}).EscapedPath())
	if err != nil {
		return err
	}
	v, err := store.ReadVersion(ctx, sdb, false)
	sdb.Close()
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", dbPath, err)
	}
	w.m.Database, w.m.Schema, w.m.StoreCUREVersion = SQLite, v.Schema, v.CUREVersion
	if err := w.addDir(dbPrefix[:len(dbPrefix)-1], w.m.Created); err != nil {
		return err
	}
	return w.addPath(sqliteName, snap)
}

// addStateDir adds the state dir's directories and regular files, but the
// lock and the live database; anything else (a symlink, a socket) is left
// out with a warning.
func addStateDir(w *writer, dir string, log *slog.Logger) error {
	if err := w.addDir(statePrefix[:len(statePrefix)-1], w.m.Created); err != nil {
		return err
	}
	var entries []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			entries = append(entries, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	sort.Strings(entries)
	for _, p := range entries {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := statePrefix + filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the walk (an expired temporary file)
		} else if err != nil {
			return err
		}
		switch {
		case skipped[rel]:
		case fi.IsDir():
			err = w.addDir(name, fi.ModTime())
		case fi.Mode().IsRegular():
			err = w.addPath(name, p)
		default:
			log.Warn("backup: not a regular file or directory: left out", "path", p, "mode", fi.Mode().String())
		}
		if err != nil {
			return err
		}
	}
	return nil
}
