package pipeline

import (
	"context"
	"net/url"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
)

// The Engine's API beyond a run's lifecycle: each is its controller's.

// AuditDirect is auditCtl.AuditDirect.
func (e *Engine) AuditDirect(ctx context.Context, nodeIDs []string, manifest string) []*curev1.NodeAudit {
	return e.audits.AuditDirect(ctx, nodeIDs, manifest)
}

// RejudgeFleet is fleetCtl.RejudgeFleet.
func (e *Engine) RejudgeFleet(ctx context.Context, sku string) (int, error) {
	return e.fleet.RejudgeFleet(ctx, sku)
}

// SweepFleet is fleetCtl.SweepFleet.
func (e *Engine) SweepFleet(ctx context.Context) (int, error) { return e.fleet.SweepFleet(ctx) }

// RunLeases is leaseCtl.RunLeases.
func (e *Engine) RunLeases(ctx context.Context) { e.leases.RunLeases(ctx) }

// BootDecision is the boot gate's (bootgate.Coordinator).
func (e *Engine) BootDecision(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	return e.boot.BootDecision(ctx, mac, peer)
}

// HTTPSBootDecision is the boot gate's (bootgate.HTTPSBooter).
func (e *Engine) HTTPSBootDecision(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	return e.boot.HTTPSBootDecision(ctx, mac, peer)
}

// HostReady is the boot gate's (bootgate.Coordinator).
func (e *Engine) HostReady(ctx context.Context, nodeID, token, peer string, readForm func() (url.Values, error)) error {
	return e.boot.HostReady(ctx, nodeID, token, peer, readForm)
}

// IdentityContested is the boot gate's (server.RunGuard).
func (e *Engine) IdentityContested(ctx context.Context, runID, detail string) {
	e.boot.IdentityContested(ctx, runID, detail)
}

// UnknownMAC is the boot gate's (bootserver and proxy DHCP).
func (e *Engine) UnknownMAC(ctx context.Context, mac, via, source string) {
	e.boot.UnknownMAC(ctx, mac, via, source)
}
