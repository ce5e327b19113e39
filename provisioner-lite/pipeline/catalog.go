package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/manifests"
)

// Catalog resolves manifest names to files in one directory: SKUs as
// <dir>/<name>.yaml, validation suites also as <dir>/suites/<name>.yaml. It
// reads the file on every use: an operator fixing a manifest mid-run gets
// the fix on the next phase, and the raw bytes sent to the runner are
// exactly what was validated.
type Catalog struct {
	Dir string
}

// LoadDocument returns the raw bytes and the parsed document of name.
func (c *Catalog) LoadDocument(name string) ([]byte, *manifests.Document, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return nil, nil, fmt.Errorf("manifest name %q is not a plain name", name)
	}
	var lastErr error
	for _, p := range []string{filepath.Join(c.Dir, name+".yaml"), filepath.Join(c.Dir, "suites", name+".yaml")} {
		raw, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			lastErr = err
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("manifest %s: %w", name, err)
		}
		doc, err := manifests.Parse(p, raw)
		if err != nil {
			return nil, nil, err
		}
		return raw, doc, nil
	}
	return nil, nil, fmt.Errorf("manifest %s: not in %s or its suites/: %w", name, c.Dir, lastErr)
}

// Load returns the raw bytes and parsed SKU of manifest name (without .yaml).
func (c *Catalog) Load(name string) ([]byte, *manifests.SKU, error) {
	raw, doc, err := c.LoadDocument(name)
	if err != nil {
		return nil, nil, err
	}
	if doc.SKU == nil {
		return nil, nil, fmt.Errorf("manifest %s is a %s; this mode needs a SKU", name, doc.Kind)
	}
	return raw, doc.SKU, nil
}
