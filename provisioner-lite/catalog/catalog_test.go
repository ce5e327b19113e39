package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const catalogSKU = `apiVersion: cure.dev/v1
kind: SKU
metadata:
  name: gpu-a
spec:
  firmware:
    - name: nvme-fw
      component: nvme
      via: in-band
      match:
        model: "QEMU NVMe Ctrl"
      version: "VERSION"
      gate: equal
      artifact:
        sha256: 70dc61be9e56ec72ddd6634d72353a2f94841db5c8040499bd97817182028156
        size: 65536
        format: bin
      activation: nvme-reset
`

// The same bytes are parsed once; an edited file is parsed again on the
// next use, and a broken edit is an error naming the file and line, never
// the document parsed before it.
func TestCatalogParsesSameBytesOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu-a.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := &Catalog{Dir: dir}
	write(strings.Replace(catalogSKU, "VERSION", "1.0", 1))
	raw1, sku1, err := c.Load("gpu-a")
	if err != nil {
		t.Fatal(err)
	}
	_, sku2, err := c.Load("gpu-a")
	if err != nil {
		t.Fatal(err)
	}
	if sku1 != sku2 {
		t.Fatal("the same bytes were parsed twice")
	}
	write(strings.Replace(catalogSKU, "VERSION", "2.0", 1))
	raw3, sku3, err := c.Load("gpu-a")
	if err != nil {
		t.Fatal(err)
	}
	if string(raw3) == string(raw1) || sku3 == sku1 || sku3.Spec.Firmware[0].Version != "2.0" {
		t.Fatalf("the edit was not taken: version %q", sku3.Spec.Firmware[0].Version)
	}
	if sku1.Spec.Firmware[0].Version != "1.0" {
		t.Fatalf("the earlier document changed: version %q", sku1.Spec.Firmware[0].Version)
	}
	write(strings.Replace(catalogSKU, "gate: equal", "gate: sometimes", 1))
	_, sku4, err := c.Load("gpu-a")
	if err == nil {
		t.Fatalf("a broken edit loaded (version %q)", sku4.Spec.Firmware[0].Version)
	}
	if !strings.Contains(err.Error(), "gpu-a.yaml") || !strings.Contains(err.Error(), ":13") {
		t.Fatalf("error does not name the file and line 13: %v", err)
	}
}

// List classifies every name as LoadDocument resolves it: SKUs, suites
// (a suites/ file shadowed by a top-level one is not listed twice), and
// files that do not validate apart.
func TestCatalogList(t *testing.T) {
	dir := t.TempDir()
	example := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for path, body := range map[string]string{
		"qemu-nvme.yaml":         example("qemu-nvme.yaml"),
		"qemu-diagnostic.yaml":   example("suites/qemu-diagnostic.yaml"),
		"suites/rma-quick.yaml":  example("suites/rma-quick.yaml"),
		"suites/qemu-nvme.yaml":  example("suites/rma-quick.yaml"),
		"broken.yaml":            "kind: SKU\nspec: [\n",
		"notes.txt":              "not a manifest",
		".hidden.yaml":           example("qemu-nvme.yaml"),
		"suites/sub.yaml/x.yaml": example("qemu-nvme.yaml"),
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := (&Catalog{Dir: dir}).List()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(l.SKUs, ","); got != "qemu-nvme" {
		t.Errorf("SKUs %q, want qemu-nvme", got)
	}
	if got := strings.Join(l.Suites, ","); got != "qemu-diagnostic,rma-quick" {
		t.Errorf("suites %q, want qemu-diagnostic,rma-quick", got)
	}
	if got := strings.Join(l.Invalid, ","); got != "broken" {
		t.Errorf("invalid %q, want broken", got)
	}
	if _, err := (&Catalog{Dir: filepath.Join(dir, "absent")}).List(); err == nil {
		t.Error("a missing manifests directory listed without error")
	}
}
