package catalog

import (
	"fmt"

	"github.com/cure-oss/cure/manifests"
)

// Admission is SKU sku's spec.admission (nil: it has none): the pool's
// admission policy (pool.Policies).
func (c *Catalog) Admission(sku string) (*manifests.Admission, error) {
	_, s, err := c.Load(sku)
	if err != nil {
		return nil, err
	}
	return s.Spec.Admission, nil
}

// Suite is the validation suite name.
func (c *Catalog) Suite(name string) (*manifests.ValidationSuite, error) {
	_, doc, err := c.LoadDocument(name)
	if err != nil {
		return nil, err
	}
	if doc.Suite == nil {
		return nil, fmt.Errorf("manifest %s is a %s, not a ValidationSuite", name, doc.Kind)
	}
	return doc.Suite, nil
}
