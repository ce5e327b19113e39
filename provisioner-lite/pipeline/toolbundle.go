package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// ToolBundle is the tool bundle this coordinator serves from its artifact
// store (--tool-bundle): fio, stress-ng, iperf3 and their libraries.
type ToolBundle struct {
	SHA256 string
	Size   int64
	Tools  []string
}

// toolBundleRef is what a validate assignment carries for its suite: the
// bundle, when the suite runs one of its programs. A suite needing a
// program this coordinator cannot serve still runs (those checks ERROR on
// the node, saying why); the run's timeline says so here first.
func (bc *batchCtl) toolBundleRef(ctx context.Context, r *store.Run, phases []modes.PhaseName, doc *manifests.Document) *curev1.ToolBundleRef {
	if doc == nil || doc.Suite == nil || !slices.Contains(phases, modes.Validate) {
		return nil
	}
	need := doc.Suite.Tools()
	if len(need) == 0 {
		return nil
	}
	tb := bc.cfg.ToolBundle
	if tb == nil {
		bc.coordEvent(ctx, *r, modes.Validate, runstate.EventLog, "WARN", fmt.Sprintf("suite %s runs %s from the tool bundle, and this coordinator serves none (start it with --tool-bundle): those checks will ERROR",
			doc.Suite.Metadata.Name, strings.Join(need, ", ")), 0)
		return nil
	}
	var missing []string
	for _, n := range need {
		if !slices.Contains(tb.Tools, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		bc.coordEvent(ctx, *r, modes.Validate, runstate.EventLog, "WARN", fmt.Sprintf("suite %s runs %s, which the tool bundle %.12s lacks (it has %s): those checks will ERROR",
			doc.Suite.Metadata.Name, strings.Join(missing, ", "), tb.SHA256, strings.Join(tb.Tools, ", ")), 0)
	}
	return &curev1.ToolBundleRef{
		Url:    strings.TrimRight(bc.cfg.BaseURL, "/") + "/artifacts/sha256/" + tb.SHA256,
		Sha256: tb.SHA256, Size: tb.Size, Tools: tb.Tools,
	}
}
