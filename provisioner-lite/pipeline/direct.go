package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

// AuditDirect compares nodes' BMCs with their manifests over Redfish only:
// firmware inventory (bmc, bios, hgx entries) and BIOS attributes. It starts
// no run, boots nothing and writes nothing; nodes are audited in parallel,
// bounded so a rack does not open hundreds of BMC sessions at once.
func (a *auditCtl) AuditDirect(ctx context.Context, nodeIDs []string, manifest string) []*curev1.NodeAudit {
	out := make([]*curev1.NodeAudit, len(nodeIDs))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, id := range nodeIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			vs, err := a.auditNode(ctx, id, manifest)
			na := &curev1.NodeAudit{NodeId: id, Verdicts: vs, DurationMs: time.Since(start).Milliseconds()}
			if err != nil {
				na.Error = err.Error()
			}
			out[i] = na
		}()
	}
	wg.Wait()
	return out
}

func (a *auditCtl) auditNode(ctx context.Context, nodeID, manifest string) ([]*curev1.Verdict, error) {
	n, err := a.cfg.Store.GetNode(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	if manifest == "" {
		manifest = n.SKU
	}
	_, sku, err := a.cfg.Manifests.Load(manifest)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeouts.BMCCall)
	b, err := a.cfg.ConnectBMC(cctx, n)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bmc %s: %w", n.BMCURL, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Timeouts.BMCCall)
		defer cancel()
		_ = b.Close(cctx)
	}()
	cctx, cancel = context.WithTimeout(ctx, 2*a.cfg.Timeouts.BMCCall)
	defer cancel()
	var vs []*curev1.Verdict
	inv, err := b.FirmwareInventory(cctx)
	if err != nil {
		return nil, fmt.Errorf("FirmwareInventory: %w", err)
	}
	for _, comp := range []string{"bmc", "bios", "hgx"} {
		rows, _ := planOOB(comp, sku.FirmwareVia(comp, manifests.ViaRedfish), inv)
		for _, r := range rows {
			vs = append(vs, &curev1.Verdict{Component: r.component, Check: "firmware", Status: r.status,
				Observed: r.observed, Expected: r.expected, Message: r.msg})
		}
	}
	if sku.Spec.BIOS != nil && len(sku.Spec.BIOS.Settings) > 0 {
		cur, err := b.BiosAttributes(cctx)
		if err != nil {
			return vs, fmt.Errorf("BIOS attributes: %w", err)
		}
		changes, matches := redfish.PlanBios(cur, sku.Spec.BIOS.Settings)
		v := &curev1.Verdict{Component: "bios", Check: "settings", Status: curev1.VerdictStatus_MATCH,
			Observed: fmt.Sprintf("%d of %d attributes match", len(matches), len(sku.Spec.BIOS.Settings))}
		if len(changes) > 0 {
			var diff []string
			for _, k := range sortedKeys(changes) {
				diff = append(diff, fmt.Sprintf("%s=%v (is %v)", k, changes[k], cur[k]))
			}
			v.Status, v.Message = curev1.VerdictStatus_DRIFT, strings.Join(diff, ", ")
		}
		vs = append(vs, v)
	}
	return vs, nil
}
