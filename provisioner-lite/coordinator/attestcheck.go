package coordinator

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
)

// attestationConfig says at start what the SKUs that require attestation
// lack (docs/SECURITY.md, measured boot): the image report's UKI, without
// which every boot of theirs is refused as a configuration error (the run
// names it too: an image may be built after the coordinator starts), and
// --ek-roots, without which a node of theirs with no pinned EK cannot enrol
// (a site that pins every EK needs no roots). Both are logged naming the
// SKUs; only a SKU that cannot be read is an error. required says whether a
// SKU requires attestation.
func attestationConfig(skus []string, required func(string) (bool, error), imageDir string, ekRoots *attestation.EKRoots, log *slog.Logger) error {
	var need []string
	for _, name := range skus {
		r, err := required(name)
		if err != nil {
			return fmt.Errorf("SKU %s: attestation policy: %w", name, err)
		}
		if r {
			need = append(need, name)
		}
	}
	if len(need) == 0 {
		return nil
	}
	names := strings.Join(need, ",")
	report := filepath.Join(imageDir, "report.json")
	r, err := imagereport.Load(report)
	switch {
	case err != nil:
		log.Error("configuration error: these SKUs require attestation and the image report is unreadable: every boot of theirs is refused until it names the signed image",
			"skus", names, "report", report, "err", err)
	case r.UKI == nil || r.UKI.AuthenticodeSHA256 == "":
		log.Error("configuration error: these SKUs require attestation and the image report names no signed image (uki.authenticode_sha256; build it with cure-build --state-dir): every boot of theirs is refused",
			"skus", names, "report", report)
	}
	if ekRoots == nil {
		log.Warn("no --ek-roots: a node of these SKUs that require attestation enrols only with a pinned EK (the nodes file's ek_sha256); an unpinned node's boot is refused as a configuration error",
			"skus", names)
	}
	return nil
}

// catalogRequires reads a SKU's attestation policy from the manifests.
func catalogRequires(dir string) func(string) (bool, error) {
	cat := &catalog.Catalog{Dir: dir}
	return func(name string) (bool, error) {
		_, sku, err := cat.Load(name)
		if err != nil {
			return false, err
		}
		return sku.Spec.Attestation == manifests.AttestationRequired, nil
	}
}
