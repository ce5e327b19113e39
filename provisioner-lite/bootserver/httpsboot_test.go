package bootserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/bootgate"
)

// httpsCoordinator is a fakeCoordinator that also answers the signed
// image's boot-parameter requests, marking them.
type httpsCoordinator struct{ *fakeCoordinator }

func (h httpsCoordinator) HTTPSBootDecision(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	d, err := h.BootDecision(ctx, mac, peer)
	d.Cmdline += " cure.via=https"
	return d, err
}

// The signed image's boot parameters come only over TLS, only for a node
// with a boot to make; the signed image is served as application/efi.
func TestHTTPSBootParams(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.imgDir, UKI), []byte("MZ-signed-uki"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		httpsCoordinator{f.coord})
	if err != nil {
		t.Fatal(err)
	}
	tlsSrv := httptest.NewTLSServer(s.Handler())
	defer tlsSrv.Close()
	plain := httptest.NewServer(s.Handler())
	defer plain.Close()
	get := func(c *http.Client, u string) (int, string, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Content-Type")
	}
	code, body, _ := get(tlsSrv.Client(), tlsSrv.URL+"/v1/boot/52-54-00-12-34-56")
	if code != 200 || strings.TrimSpace(body) != "cure.token=tok123 cure.node=n1 cure.coordinator=10.0.2.2:9443 cure.via=https" {
		t.Errorf("over TLS: %d %q", code, body)
	}
	if code, body, _ := get(plain.Client(), plain.URL+"/v1/boot/52:54:00:12:34:56"); code != http.StatusForbidden || strings.Contains(body, "tok123") {
		t.Errorf("over plain HTTP: %d %q, want 403 and no token", code, body)
	}
	if code, _, _ := get(tlsSrv.Client(), tlsSrv.URL+"/v1/boot/52:54:00:12:34:57"); code != http.StatusConflict {
		t.Errorf("node without a boot: %d, want 409", code)
	}
	if code, _, _ := get(tlsSrv.Client(), tlsSrv.URL+"/v1/boot/52:54:00:99:99:99"); code != http.StatusNotFound {
		t.Errorf("unknown MAC: %d, want 404", code)
	}
	if code, _, _ := get(tlsSrv.Client(), tlsSrv.URL+"/v1/boot/not-a-mac"); code != http.StatusBadRequest {
		t.Errorf("bad MAC: %d, want 400", code)
	}
	code, body, ct := get(tlsSrv.Client(), tlsSrv.URL+"/image/"+UKI)
	if code != 200 || body != "MZ-signed-uki" || ct != "application/efi" {
		t.Errorf("signed image: %d %q %q", code, body, ct)
	}
	// A coordinator without the HTTPS path refuses even over TLS.
	s2, _ := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, f.coord)
	tls2 := httptest.NewTLSServer(s2.Handler())
	defer tls2.Close()
	if code, _, _ := get(tls2.Client(), tls2.URL+"/v1/boot/52:54:00:12:34:56"); code != http.StatusForbidden {
		t.Errorf("coordinator without HTTPS boot: %d, want 403", code)
	}
}
