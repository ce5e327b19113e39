package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// imageDirs are the images of other architectures than amd64's
// --image-dir, for bootserver.Config.ImageDirs (nil: amd64 only).
func (c *Config) imageDirs() map[string]string {
	if c.ImageDirArm64 == "" {
		return nil
	}
	return map[string]string{bootserver.ArchARM64: c.ImageDirArm64}
}

// checkArchImages refuses to start when a SKU of the site says spec.arch
// arm64 and no arm64 image is configured (its nodes would PXE into
// nothing), and checks the arm64 image as --image-dir's: its report names
// arm64 and its CA is this coordinator's.
func checkArchImages(c *Config, skus []string, caPEM []byte, log *slog.Logger) error {
	cat := &catalog.Catalog{Dir: c.ManifestDir}
	for _, name := range skus {
		_, sku, err := cat.Load(name)
		if err != nil {
			continue // sitecheck has reported it
		}
		if sku.Spec.Architecture() == manifests.ArchARM64 && c.ImageDirArm64 == "" {
			return fmt.Errorf("refusing to start: %s: spec.arch: arm64, and this coordinator has no arm64 CURE image: build one (make image-arm64) and pass --image-dir-arm64 DIR",
				filepath.Join(c.ManifestDir, name+".yaml"))
		}
	}
	if c.ImageDirArm64 == "" {
		return nil
	}
	r, err := imagereport.Load(filepath.Join(c.ImageDirArm64, "report.json"))
	if err == nil && r.Arch != bootserver.ArchARM64 {
		return fmt.Errorf("refusing to start: --image-dir-arm64 %s: report.json says arch %q: build it with cure-build --arch arm64", c.ImageDirArm64, r.Arch)
	}
	if ca, err := pki.CheckImageCA(c.ImageDirArm64, caPEM, c.StateDir); errors.Is(err, pki.ErrNoImageReport) {
		log.Warn("the arm64 image's CA cannot be checked: if its runners do not register, rebuild it with cure-build --state-dir", "image_dir_arm64", c.ImageDirArm64, "err", err)
	} else if err != nil {
		return fmt.Errorf("refusing to start: --image-dir-arm64: %w", err)
	} else {
		log.Info("the arm64 image trusts this coordinator's CA", "image_dir_arm64", c.ImageDirArm64, "ca", ca.Fingerprint)
	}
	return nil
}

// siteSKUs are the SKUs the site lint found (none with manifests from the
// store: their bundle is linted once the store is open).
func (d *daemon) siteSKUs() []string {
	if d.site == nil {
		return nil
	}
	return d.site.SKUs
}

// nodeArch says a known node's architecture from its SKU's spec.arch, for
// the boot server; "" for a MAC not in the inventory or a node without a
// SKU.
func nodeArch(st *store.Store, cat *catalog.Catalog) func(ctx context.Context, mac string) (string, error) {
	return func(ctx context.Context, mac string) (string, error) {
		n, err := st.NodeByMAC(ctx, mac)
		if err != nil || n.SKU == "" {
			return "", nil // not in the inventory: the iPXE's architecture decides
		}
		_, sku, err := cat.Load(n.SKU)
		if err != nil {
			return "", fmt.Errorf("node %s: SKU %s: %w", n.ID, n.SKU, err)
		}
		return sku.Spec.Architecture(), nil
	}
}
