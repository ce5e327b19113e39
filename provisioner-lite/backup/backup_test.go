package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
	"github.com/klauspost/compress/zstd"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newState is a state dir held by an open state dir lock (as a running
// coordinator holds it) with a store on dsn ("" for SQLite in it): one
// node with a sealed BMC password, and one run.
func newState(t *testing.T, dsn string) (dir string, st *store.Store) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "state")
	sd, err := statedir.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	if err := os.MkdirAll(sd.Join("pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sd.Join("pki", "ca.pem"), []byte("a CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	if dsn == "" {
		dsn = sd.Join(statedir.DBFile)
	}
	st, err = store.OpenDSN(dsn, store.WithStateKey(sd.Key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := ctxT(t)
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://10.0.0.1", BMCUser: "admin", BMCPassword: "s3cret", SKU: "qemu-nvme",
		MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, store.Run{ID: "r1", NodeID: "n1", Mode: modes.Provision, Status: curev1.RunStatus_RUN_RUNNING}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.AppendEvent(ctx, store.Event{RunID: "r1", NodeID: "n1", Source: runstate.SourceCoordinator, Kind: runstate.EventInfo, Message: "before the backup"}); err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// checkRestored opens the restored store with the restored key: the node
// (its sealed password read back), the run and its event are there.
func checkRestored(t *testing.T, dir, dsn string) {
	t.Helper()
	ctx := ctxT(t)
	key, err := os.ReadFile(filepath.Join(dir, statedir.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if dsn == "" {
		dsn = filepath.Join(dir, statedir.DBFile)
	}
	st, err := store.OpenDSN(dsn, store.WithStateKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.GetNode(ctx, "n1")
	if err != nil || n.BMCPassword != "s3cret" {
		t.Fatalf("restored node %+v %v", n, err)
	}
	r, err := st.GetRun(ctx, "r1")
	if err != nil || r.Status != curev1.RunStatus_RUN_RUNNING {
		t.Fatalf("restored run %+v %v", r, err)
	}
	if evs, err := st.Events(ctx, "r1", 0, 100); err != nil || len(evs) != 1 {
		t.Fatalf("restored events %+v %v", evs, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pki", "ca.pem")); err != nil || string(b) != "a CA" {
		t.Fatalf("restored pki/ca.pem %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, statedir.LockFile)); err == nil {
		t.Error("the lock file was backed up and restored")
	}
	// New rows after a restore get fresh ids (PostgreSQL identities moved on).
	id, _, err := st.AppendEvent(ctx, store.Event{RunID: "r1", NodeID: "n1", Source: runstate.SourceCoordinator, Kind: runstate.EventInfo, Message: "after the restore"})
	if err != nil || id <= 1 {
		t.Fatalf("event after restore: id %d %v", id, err)
	}
}

func roundTrip(t *testing.T, dsn, target string) {
	ctx := ctxT(t)
	dir, _ := newState(t, dsn)
	out := filepath.Join(t.TempDir(), "cure.backup")
	sum, err := Backup(ctx, Options{StateDir: dir, DSN: dsn, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive %v %v, want mode 0600", fi, err)
	}
	if sum.Manifest.Schema != store.SchemaVersion || sum.Manifest.CUREVersion == "" {
		t.Fatalf("manifest %+v", sum.Manifest)
	}
	if _, err := Backup(ctx, Options{StateDir: dir, DSN: dsn, Out: out}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second backup over the first: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(ctx, RestoreOptions{In: out, StateDir: dst, DSN: target})
	if err != nil {
		t.Fatal(err)
	}
	if res.Store.Schema != store.SchemaVersion {
		t.Fatalf("restored store %+v", res.Store)
	}
	checkRestored(t, dst, target)
	// A second restore into the now non-empty targets is refused, then forced.
	if _, err := Restore(ctx, RestoreOptions{In: out, StateDir: dst, DSN: target}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore over a restored state: %v", err)
	}
	res, err = Restore(ctx, RestoreOptions{In: out, StateDir: dst, DSN: target, Force: true})
	if err != nil || res.MovedTo == "" {
		t.Fatalf("forced restore: %+v %v", res, err)
	}
	checkRestored(t, dst, target)
}

// A running coordinator's state (its lock held) backs up and restores
// into a fresh state dir and database: nodes with their sealed secrets,
// runs, events, the PKI; never the lock.
func TestBackupRestoreSQLite(t *testing.T) { roundTrip(t, "", "") }

func TestBackupRestorePostgres(t *testing.T) {
	pg := pgtest.Shared(t)
	roundTrip(t, pg.NewDatabase(t), pg.NewDatabase(t))
}

// A restore refuses a running coordinator's state dir, and an archive
// whose member was altered, before touching the target.
func TestRestoreRefuses(t *testing.T) {
	ctx := ctxT(t)
	dir, _ := newState(t, "")
	out := filepath.Join(t.TempDir(), "cure.backup")
	if _, err := Backup(ctx, Options{StateDir: dir, Out: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, RestoreOptions{In: out, StateDir: dir, Force: true}); err == nil || !strings.Contains(err.Error(), "running coordinator") {
		t.Fatalf("restore into a locked state dir: %v", err)
	}
	bad := rewrite(t, out, func(name string, b []byte) []byte {
		if name == "state/pki/ca.pem" {
			return []byte("b CA")
		}
		return b
	})
	dst := filepath.Join(t.TempDir(), "restored")
	_, err := Restore(ctx, RestoreOptions{In: bad, StateDir: dst})
	if err == nil || !strings.Contains(err.Error(), `"state/pki/ca.pem"`) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged archive: %v", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("a refused restore created the state dir")
	}
}

// rewrite copies archive in with each member's content passed through edit.
func rewrite(t *testing.T, in string, edit func(string, []byte) []byte) string {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		b = edit(h.Name, b)
		h.Size = int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	out := filepath.Join(t.TempDir(), "edited.backup")
	if err := os.WriteFile(out, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// Member names that would leave the extraction directory, and entry kinds
// other than files and directories, are refused.
func TestExtractRefusesUnsafeEntries(t *testing.T) {
	for _, h := range []tar.Header{
		{Name: "state/../../etc/passwd", Typeflag: tar.TypeReg},
		{Name: "/state/x", Typeflag: tar.TypeReg},
		{Name: "other/x", Typeflag: tar.TypeReg},
		{Name: "state/link", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		{Name: "state/hard", Typeflag: tar.TypeLink, Linkname: "state/x"},
		{Name: "state//x", Typeflag: tar.TypeReg},
	} {
		var buf bytes.Buffer
		zw, _ := zstd.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		h.Mode = 0o600
		tw.WriteHeader(&h)
		tw.Close()
		zw.Close()
		dir := t.TempDir()
		if _, err := Extract(&buf, dir, ExtractLimits{}); err == nil || !strings.Contains(err.Error(), "archive:") {
			t.Errorf("%s (%c): %v, want refused", h.Name, h.Typeflag, err)
		}
	}
}

// The archive reader takes untrusted bytes: it never panics, never
// writes outside its directory, and accepts only what its manifest
// vouches for.
func FuzzExtract(f *testing.F) {
	var buf bytes.Buffer
	w, _ := newWriter(&buf)
	w.m.Database = SQLite
	w.addDir("db", time.Time{})
	w.addFile(sqliteName, strings.NewReader("db"), 2, time.Time{})
	w.addDir("state", time.Time{})
	w.addFile("state/state.key", strings.NewReader("0123456789abcdef0123456789abcdef"), 32, time.Time{})
	w.close()
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "x")
		os.Mkdir(dir, 0o700)
		m, err := Extract(bytes.NewReader(data), dir, ExtractLimits{MaxBytes: 1 << 20})
		if err == nil && m.Format != Format {
			t.Fatalf("accepted format %d", m.Format)
		}
		entries, _ := os.ReadDir(root)
		if len(entries) != 1 {
			t.Fatalf("extraction wrote beside its directory: %v", entries)
		}
	})
}
