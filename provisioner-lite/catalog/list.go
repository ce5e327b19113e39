package catalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Listing is what a catalog's directory offers, by the names runs take.
type Listing struct {
	SKUs   []string
	Suites []string
	// Invalid are the names whose file the coordinator would refuse: it
	// does not validate (a SKU mid-edit, a stray YAML file).
	Invalid []string
}

// List names every manifest the catalog resolves, each sorted: a name is
// classified as LoadDocument resolves it, so a suites/ file shadowed by a
// top-level one of the same name is listed once, as the top-level one.
// Files are parsed through the cache, once per content.
func (c *Catalog) List() (Listing, error) {
	names := map[string]bool{}
	for _, dir := range []string{c.Dir, filepath.Join(c.Dir, "suites")} {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) && dir != c.Dir {
			continue
		}
		if err != nil {
			return Listing{}, fmt.Errorf("manifests directory: %w", err)
		}
		for _, e := range entries {
			n, ok := strings.CutSuffix(e.Name(), ".yaml")
			if ok && !e.IsDir() && n != "" && !strings.HasPrefix(n, ".") {
				names[n] = true
			}
		}
	}
	var l Listing
	for n := range names {
		_, doc, err := c.LoadDocument(n)
		switch {
		case err != nil:
			l.Invalid = append(l.Invalid, n)
		case doc.SKU != nil:
			l.SKUs = append(l.SKUs, n)
		case doc.Suite != nil:
			l.Suites = append(l.Suites, n)
		}
	}
	slices.Sort(l.SKUs)
	slices.Sort(l.Suites)
	slices.Sort(l.Invalid)
	return l, nil
}
