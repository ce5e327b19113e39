package coordinator

import (
	"log/slog"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
)

// fleetRetention is how long measurements are kept: keep, raised to the
// longest fleet window of the site's suites, so no suite judges a node
// against a fleet the retention has already cut short. Zero keeps them
// forever, as for the other retentions.
func fleetRetention(keep time.Duration, manifestDir string, suites []string, log *slog.Logger) time.Duration {
	if keep <= 0 {
		return keep
	}
	cat := &catalog.Catalog{Dir: manifestDir}
	for _, name := range suites {
		_, doc, err := cat.LoadDocument(name)
		if err != nil || doc.Suite == nil || len(fleetband.Bands(&doc.Suite.Spec)) == 0 {
			continue
		}
		if w, _ := fleetband.Policy(&doc.Suite.Spec); w > keep {
			log.Info("fleet retention raised to a suite's fleet window", "suite", name, "window", w, "was", keep)
			keep = w
		}
	}
	return keep
}
