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
