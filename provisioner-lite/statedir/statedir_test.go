package statedir

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestStateDirPermissions(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask: without care, files would be world-readable
	defer syscall.Umask(old)
	parent := t.TempDir()
	dir := filepath.Join(parent, "state")
	d, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, d.Join(KeyFile): 0o600, d.Join(LockFile): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s is %v, want %v", path, st.Mode().Perm(), want)
		}
	}
	if len(d.Key) != 32 {
		t.Fatalf("key is %d bytes", len(d.Key))
	}
	d.Close()

	// A state dir an older coordinator created 0755, with a 0644 key: narrowed, with a warning.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d2, err := Open(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("wide state dir left %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(filepath.Join(dir, KeyFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("wide key left %v", st.Mode().Perm())
	}
	if !strings.Contains(logs.String(), "narrowed to 0700") || !strings.Contains(logs.String(), "narrowed to 0600") {
		t.Errorf("no warning about the narrowed permissions: %s", logs.String())
	}
	if !bytes.Equal(d2.Key, d.Key) {
		t.Fatal("key changed between opens")
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, quiet())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Open: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	d.Close()
	d3, err := Open(dir, quiet())
	if err != nil {
		t.Fatalf("Open after the first closed: %v", err)
	}
	d3.Close()
}

func TestDamagedKeyRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, quiet()); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("damaged key: %v", err)
	}
}
