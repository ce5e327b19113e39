package pki

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckImageCA(t *testing.T) {
	dir := t.TempDir()
	own, err := EnsureCA(filepath.Join(dir, "state", "pki"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := EnsureCA(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(v any) string {
		img := t.TempDir()
		b, _ := json.Marshal(v)
		os.WriteFile(filepath.Join(img, ReportFile), b, 0o644)
		return img
	}
	ownCA, err := DescribeCA("own", own)
	if err != nil || !strings.HasPrefix(ownCA.Fingerprint, "sha256:") || len(ownCA.Fingerprint) != 71 {
		t.Fatalf("DescribeCA: %+v %v", ownCA, err)
	}
	otherCA, _ := DescribeCA("other", other)
	if _, err := CheckImageCA(t.TempDir(), own, "state"); !errors.Is(err, ErrNoImageReport) {
		t.Fatalf("no report: %v", err)
	}
	if _, err := CheckImageCA(write(map[string]any{"kind": "image"}), own, "state"); err == nil || !strings.Contains(err.Error(), "records no CA") {
		t.Fatalf("no CA in the report: %v", err)
	}
	if _, err := CheckImageCA(write(map[string]any{"kind": "image", "ca": otherCA}), own, "state"); err == nil ||
		!strings.Contains(err.Error(), otherCA.Fingerprint) || !strings.Contains(err.Error(), ownCA.Fingerprint) || !strings.Contains(err.Error(), "cure-build --state-dir state") {
		t.Fatalf("another CA: %v", err)
	}
	if got, err := CheckImageCA(write(map[string]any{"kind": "image", "ca": ownCA}), own, "state"); err != nil || got != ownCA {
		t.Fatalf("own CA: %+v %v", got, err)
	}
	if _, err := DescribeCA("junk", []byte("nope")); err == nil {
		t.Fatal("junk described")
	}
}
