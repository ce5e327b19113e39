package attestpolicy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestRequired reads the SKU's attestation: field through the catalog; a
// node without a SKU, or a policy without a catalog, requires nothing, and
// an unknown SKU is an error, not a pass.
func TestRequired(t *testing.T) {
	ctx := context.Background()
	p := &Policy{Catalog: &catalog.Catalog{Dir: "../../manifests/examples"}}
	for _, c := range []struct {
		sku     string
		want    bool
		wantErr bool
	}{{"hgx-b200", true, false}, {"qemu-nvme", false, false}, {"", false, false}, {"no-such-sku", false, true}} {
		got, err := p.Required(ctx, store.Node{ID: "n1", SKU: c.sku})
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("Required(sku %q) = %v, %v; want %v, error %v", c.sku, got, err, c.want, c.wantErr)
		}
	}
	var none *Policy
	if got, err := none.Required(ctx, store.Node{SKU: "hgx-b200"}); got || err != nil {
		t.Errorf("nil policy: Required = %v, %v; want false, nil", got, err)
	}
}

// TestImageUKI: no image directory, no report, or an unreadable report
// give no UKI (the boot PCRs are then not compared).
func TestImageUKI(t *testing.T) {
	if u := (&Policy{}).ImageUKI(); u != nil {
		t.Errorf("no ImageDir: UKI %+v", u)
	}
	dir := t.TempDir()
	if u := (&Policy{ImageDir: dir}).ImageUKI(); u != nil {
		t.Errorf("no report.json: UKI %+v", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if u := (&Policy{ImageDir: dir}).ImageUKI(); u != nil {
		t.Errorf("unreadable report.json: UKI %+v", u)
	}
}
