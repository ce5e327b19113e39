package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// manifests push stores a linted directory as the next bundle, the same
// directory again as the same version, and refuses a directory that does
// not lint (nothing stored).
func TestManifestsPush(t *testing.T) {
	db := filepath.Join(t.TempDir(), "cure.db")
	src := filepath.Join("..", "..", "..", "manifests", "examples")
	var out bytes.Buffer
	if rc := runManifests([]string{"push", "--db", db, src}, &out); rc != 0 || !strings.Contains(out.String(), "manifest bundle 1 stored") {
		t.Fatalf("push: rc %d, %q", rc, out.String())
	}
	out.Reset()
	if rc := runManifests([]string{"push", "--db", db, src}, &out); rc != 0 || !strings.Contains(out.String(), "manifest bundle 1 stored") {
		t.Fatalf("same push again: rc %d, %q", rc, out.String())
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "broken.yaml"), []byte("apiVersion: cure/v1\nkind: SKU\nmetadata: {name: broken}\nspec: {nonsense: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rc := runManifests([]string{"push", "--db", db, bad}, &out); rc != 1 {
		t.Fatalf("push of a directory that does not lint: rc %d, want 1", rc)
	}
	if rc := runManifests([]string{"push", src}, &out); rc != 2 && os.Getenv("CURE_DB") == "" {
		t.Fatalf("push without --db: rc %d, want 2", rc)
	}
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, ok, err := st.NewestManifestBundle(context.Background(), 0)
	if err != nil || !ok || b.Version != 1 || len(b.Files["suites/qemu-diagnostic.yaml"]) == 0 {
		t.Fatalf("stored bundle %d (%d files), ok %v, err %v", b.Version, len(b.Files), ok, err)
	}
}

// A running instance with --manifests-from-store loads a newer bundle as
// it is pushed, without a restart: v1 at start, v2 (a new SKU) picked up
// by the catalog it answers from; a v3 stored without the lint (another
// tool, or a push that skipped it) that does not lint is not loaded, v2
// stays and the log says why.
func TestManifestBundleReloadedWhileRunning(t *testing.T) {
	s := newSite(t)
	db := filepath.Join(s.state, "cure.db")
	v2 := t.TempDir()
	if err := os.CopyFS(v2, os.DirFS(s.manifests)); err != nil {
		t.Fatal(err)
	}
	sku, err := os.ReadFile(filepath.Join(v2, "qemu-nvme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sku = bytes.Replace(sku, []byte("name: qemu-nvme\n"), []byte("name: qemu-nvme-v2\n"), 1)
	if err := os.WriteFile(filepath.Join(v2, "qemu-nvme-v2.yaml"), sku, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if rc := runManifests([]string{"push", "--db", db, s.manifests}, &out); rc != 0 {
		t.Fatalf("push v1: rc %d %s", rc, out.String())
	}
	c := s.start("--manifests-from-store", "--lease-ttl", "600ms")
	viewer := s.client(c, &s.viewer)
	list := func() *curev1.ListManifestsResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := viewer.ListManifests(ctx, &curev1.ListManifestsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := list(); r.BundleVersion != 1 || slices.Contains(r.Skus, "qemu-nvme-v2") || !slices.Contains(r.Skus, "qemu-nvme") {
		t.Fatalf("at start: bundle %d, SKUs %q; want bundle 1 without qemu-nvme-v2", r.BundleVersion, r.Skus)
	}
	if rc := runManifests([]string{"push", "--db", db, v2}, &out); rc != 0 || !strings.Contains(out.String(), "manifest bundle 2 stored") {
		t.Fatalf("push v2: rc %d %s", rc, out.String())
	}
	deadline := time.Now().Add(15 * time.Second)
	r := list()
	for ; r.BundleVersion != 2 && time.Now().Before(deadline); r = list() {
		time.Sleep(100 * time.Millisecond)
	}
	if r.BundleVersion != 2 || !slices.Contains(r.Skus, "qemu-nvme-v2") {
		t.Fatalf("after push v2: bundle %d, SKUs %q; want bundle 2 with qemu-nvme-v2\n%s", r.BundleVersion, r.Skus, tail(s.coordinatorLog(), 20))
	}
	// v3: v2 and a file the lint refuses, stored as a push would.
	files, err := readBundle(v2)
	if err != nil {
		t.Fatal(err)
	}
	files["broken.yaml"] = []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: broken}\nspec: {nonsense: 1}\n")
	st := s.openStore()
	if v, err := st.PutManifestBundle(context.Background(), files, "test"); err != nil || v != 3 {
		t.Fatalf("store v3: %d %v", v, err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for !strings.Contains(s.coordinatorLog(), "newer manifest bundle not loaded") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if r := list(); r.BundleVersion != 2 || slices.Contains(r.Skus, "broken") || !slices.Contains(r.Skus, "qemu-nvme-v2") {
		t.Fatalf("after v3 that does not lint: bundle %d, SKUs %q; want bundle 2 still", r.BundleVersion, r.Skus)
	}
	if log := s.coordinatorLog(); !strings.Contains(log, "newer manifest bundle not loaded: the site does not lint on it") || !strings.Contains(log, "version=3") {
		t.Fatalf("v3's refusal not logged:\n%s", tail(log, 20))
	}
}

// --peer-url is an http(s) base URL with a host: anything else is a usage
// error naming the flag, before anything is created.
func TestPeerURLRefused(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"10.1.2.3:8080", "ftp://10.1.2.3/", "http://", "http://u:p@10.1.2.3:8080", "http://10.1.2.3:8080/?x=1"} {
		rc, out := runMain(t, dir, "--state-dir", "state", "--peer-url", v)
		if rc != 2 || !strings.Contains(out, "--peer-url") {
			t.Errorf("--peer-url %q: rc %d, want 2 naming the flag:\n%s", v, rc, out)
		}
		if strings.Contains(out, "u:p@") {
			t.Errorf("--peer-url %q: the refusal quotes the password:\n%s", v, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused --peer-url created %v", entries)
	}
}
