// Package statedir owns the coordinator's state directory: it is private
// (0700), held by one coordinator at a time (an exclusive lock for the
// process's life), and keeps the state key that seals secrets in the
// database, outside the database (docs/SECURITY.md).
package statedir

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// File names inside the state dir.
const (
	LockFile = "state.lock"
	KeyFile  = "state.key"
	DBFile   = "cure.db"
)

// Dir is an opened, locked state directory.
type Dir struct {
	Path string
	Key  []byte // 32 bytes: the store's state key
	lock *os.File
}

// ErrLocked means another process holds the state dir.
var ErrLocked = errors.New("state dir is in use by another coordinator")

// Open creates path (0700) if needed, narrows it to 0700 if it is wider
// (warning through log), takes the exclusive lock, and loads or creates the
// state key. Close releases the lock.
func Open(path string, log *slog.Logger) (*Dir, error) {
	if log == nil {
		log = slog.Default()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("state dir %s: %w", path, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", abs, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("state dir %s: %w", abs, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("state dir %s is not a directory", abs)
	}
	if perm := st.Mode().Perm(); perm != 0o700 {
		if err := os.Chmod(abs, 0o700); err != nil {
			return nil, fmt.Errorf("state dir %s is %v and cannot be made private: %w", abs, perm, err)
		}
		log.Warn("state dir was readable by others: narrowed to 0700", "dir", abs, "was", perm.String())
	}
	lockPath := filepath.Join(abs, LockFile)
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir %s: lock: %w", abs, err)
	}
	// flock, not fcntl: a second open of the file in the same process
	// conflicts too, and the lock dies with the process.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by pid %s (%s): two coordinators on one state would drive the same nodes; stop the other one or use another --state-dir",
				ErrLocked, abs, holder, lockPath)
		}
		return nil, fmt.Errorf("state dir %s: lock %s: %w", abs, lockPath, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	key, err := loadKey(filepath.Join(abs, KeyFile), log)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Dir{Path: abs, Key: key, lock: f}, nil
}

// Close releases the lock.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor drops the flock
	d.lock = nil
	return err
}

// Join returns a path inside the state dir.
func (d *Dir) Join(elem ...string) string { return filepath.Join(append([]string{d.Path}, elem...)...) }

func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid := strings.TrimSpace(string(b[:n])); pid != "" {
		return pid
	}
	return "unknown"
}

// loadKey reads the 32-byte state key, creating it on first start. A key
// file of another size is refused: replacing it would make every sealed
// secret unreadable.
func loadKey(path string, log *slog.Logger) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("state key %s: %w", path, err)
		}
		if _, err := f.Write(key); err != nil {
			f.Close()
			return nil, fmt.Errorf("state key %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("state key %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		log.Info("state key created: it seals BMC passwords and PSIDs in the database; back it up with the database", "file", path)
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state key %s: %w", path, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("state key %s is %d bytes, want 32: it was damaged or replaced, and the sealed secrets in the database need the original", path, len(key))
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("state key %s: %w", path, err)
		}
		log.Warn("state key was readable by others: narrowed to 0600", "file", path)
	}
	return key, nil
}
