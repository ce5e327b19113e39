package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
