package coordinator

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttestationConfigAtStart: at start, a SKU that requires attestation
// with no image report, or one that names no signed image, is a
// configuration error in the log naming the SKU and report.json (the run
// refuses its boots too), and without --ek-roots a warning names the SKU;
// SKUs that do not require attestation need neither; a SKU whose policy
// cannot be read stops the start.
func TestAttestationConfigAtStart(t *testing.T) {
	required := func(name string) (bool, error) { return name == "gpu-attested", nil }
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	img := t.TempDir()
	check := func(skus ...string) string {
		t.Helper()
		logs.Reset()
		if err := attestationConfig(skus, required, img, nil, log); err != nil {
			t.Fatal(err)
		}
		return logs.String()
	}
	if out := check("plain"); out != "" {
		t.Fatalf("no SKU requires attestation, yet:\n%s", out)
	}
	if out := check("plain", "gpu-attested"); !strings.Contains(out, "configuration error") || !strings.Contains(out, "skus=gpu-attested") || !strings.Contains(out, "report.json") {
		t.Fatalf("no image report:\n%s\nwant a configuration error naming the SKU and report.json", out)
	}
	if err := os.WriteFile(filepath.Join(img, "report.json"), []byte(`{"kind":"image"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := check("gpu-attested"); !strings.Contains(out, "names no signed image") {
		t.Fatalf("report without a UKI:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(img, "report.json"), []byte(`{"kind":"image","uki":{"authenticode_sha256":"`+strings.Repeat("ab", 32)+`"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := check("gpu-attested"); strings.Contains(out, "configuration error: these SKUs require attestation and the image") || !strings.Contains(out, "no --ek-roots") || !strings.Contains(out, "gpu-attested") {
		t.Fatalf("with the report, without --ek-roots:\n%s\nwant only the --ek-roots warning naming the SKU", out)
	}
	bad := func(string) (bool, error) { return false, os.ErrNotExist }
	if err := attestationConfig([]string{"gone"}, bad, img, nil, log); err == nil || !strings.Contains(err.Error(), "SKU gone") {
		t.Fatalf("unreadable policy: %v", err)
	}
}
