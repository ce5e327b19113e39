package server

import (
	"context"
	"log/slog"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/cabling"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// judgeCabling judges, once per boot, what the node's ports heard over
// LLDP (its Hello's inventory) against the site's cabling map for the node
// (the nodes file's cabling:), and keeps a verdict per mapped port with the
// run: the coordinator's judgement, never the runner's. A node without a
// map gets none.
func (s *RunnerService) judgeCabling(ctx context.Context, node store.Node, runID string, inv *curev1.Inventory, log *slog.Logger) {
	vs := cabling.Judge(node.Cabling, inv)
	now := time.Now().UTC()
	failed := 0
	for _, v := range vs {
		if v.GetStatus() != curev1.VerdictStatus_PASS {
			failed++
		}
		err := s.Store.PutVerdict(ctx, store.Verdict{RunID: runID, Component: v.GetComponent(), Check: v.GetCheck(), Status: v.GetStatus(),
			Observed: v.GetObserved(), Expected: v.GetExpected(), Message: textsafe.Bounded(v.GetMessage(), maxMessage), Time: now})
		if err != nil {
			log.Error("store cabling verdict", "component", v.GetComponent(), "err", err)
		}
	}
	if len(vs) > 0 {
		log.Info("cabling judged against the site's map", "ports", len(vs), "not_passed", failed)
	}
}
