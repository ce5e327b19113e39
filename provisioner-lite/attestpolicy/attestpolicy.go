// Package attestpolicy is the coordinator's measured-boot policy from its
// files, which the runner service (server.AttestPolicy) judges boots with:
// the image's report.json and the SKU manifests' attestation: field. The
// judging itself is provisioner-lite/attestation's.
package attestpolicy

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Policy is the coordinator's measured-boot policy from its files: the
// image's report.json (the UKI a boot is checked against) and the SKU
// manifests (attestation: required). The runner service asks it.
type Policy struct {
	Catalog  *catalog.Catalog
	ImageDir string // cure-build output holding report.json ("" : none)
	Log      *slog.Logger
}

// ImageUKI is the image report's UKI, nil when the image has none (a
// kernel and initramfs booted over PXE: nothing to compare the boot PCRs
// with, so only the quote, EK and firmware measurements are checked).
func (p *Policy) ImageUKI() *imagereport.UKI {
	if p == nil || p.ImageDir == "" {
		return nil
	}
	r, err := imagereport.Load(filepath.Join(p.ImageDir, "report.json"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && p.Log != nil {
			p.Log.Warn("image report unreadable: boots are not checked against the image's measurements", "err", err)
		}
		return nil
	}
	return r.UKI
}

// Required says whether the node's SKU requires attestation.
func (p *Policy) Required(ctx context.Context, n store.Node) (bool, error) {
	if p == nil || p.Catalog == nil || n.SKU == "" {
		return false, nil
	}
	_, sku, err := p.Catalog.Load(n.SKU)
	if err != nil {
		return false, err
	}
	return sku.Spec.Attestation == manifests.AttestationRequired, nil
}
