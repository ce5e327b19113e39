package dashboard

import (
	"context"
	"errors"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// fleetBands adds the run's fleet judgement to a node page: a plot of each
// distribution the run was judged against with the node's components
// marked (server-rendered SVG: the page's CSP allows no inline script or
// style), and the judgements, MARGINAL first.
func (d *dash) fleetBands(ctx context.Context, runID string, data map[string]any) {
	js, _, err := d.cfg.Store.RunFleetJudgement(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return
	}
	var rec curev1.FleetJudgements
	if err == nil {
		err = protojson.Unmarshal(js, &rec)
	}
	if err != nil {
		d.cfg.Log.Warn("dashboard: fleet judgement", "run", runID, "err", err)
		return
	}
	data["FleetPlots"] = render.FleetPlots(rec.GetJudgements(), rec.GetDistributions())
	data["Fleet"] = render.FleetRows(rec.GetJudgements(), rec.GetDistributions(), nil)
}
