package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
)

// TestVerifyArtifact: preflight checks store files and URL artifacts with
// the shared fetcher (tools/artifact); a mismatch names what was expected,
// what was found and where.
func TestVerifyArtifact(t *testing.T) {
	body := []byte(strings.Repeat("bundle ", 500))
	s := sha256.Sum256(body)
	sum := hex.EncodeToString(s[:])
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sha256", sum), body, 0o644); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("ab", 32)
	if err := os.WriteFile(filepath.Join(dir, "sha256", other), body, 0o644); err != nil { // stored under the wrong name
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	e := &checkCtl{&core{cfg: Config{ArtifactDir: dir}}}
	n := int64(len(body))
	for _, tc := range []struct {
		name string
		a    manifests.Artifact
		err  string // "" = verified
	}{
		{"store", manifests.Artifact{SHA256: sum, Size: n}, ""},
		{"store, wrong size", manifests.Artifact{SHA256: sum, Size: n + 1}, "size: expected 3501 bytes, got 3500"},
		{"store, wrong content", manifests.Artifact{SHA256: other, Size: n}, "sha256 mismatch: expected " + other + ", got " + sum},
		{"store, absent", manifests.Artifact{SHA256: strings.Repeat("cd", 32), Size: n}, "no such file"},
		{"url", manifests.Artifact{URL: srv.URL + "/b.bfb", SHA256: sum, Size: n}, ""},
		{"url, wrong size", manifests.Artifact{URL: srv.URL + "/b.bfb", SHA256: sum, Size: n - 1}, srv.URL + "/b.bfb: artifact mismatch: size: expected 3499 bytes, got more"},
	} {
		err := e.verifyArtifact(context.Background(), &tc.a)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
