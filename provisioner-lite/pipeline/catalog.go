package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/manifests"
)

// Catalog resolves manifest names to files in one directory. It reads the
// file on every use: an operator fixing a manifest mid-run gets the fix on the
// next phase, and the raw bytes sent to the runner are exactly what was
// validated.
type Catalog struct {
	Dir string
}

// Load returns the raw bytes and parsed SKU of manifest name (without .yaml).
func (c *Catalog) Load(name string) ([]byte, *manifests.SKU, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return nil, nil, fmt.Errorf("manifest name %q is not a plain name", name)
	}
	p := filepath.Join(c.Dir, name+".yaml")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	sku, err := manifests.ParseSKU(p, raw)
	if err != nil {
		return nil, nil, err
	}
	return raw, sku, nil
}
