package phases

import (
	"context"
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/hardware"
)

// defaultLinkWait bounds the wait for NIC ports brought up by the hardware
// phase to train (a 400G port takes a few seconds).
const defaultLinkWait = 20 * time.Second

// runHardware compares the node with its SKU's spec.hardware (tools/checks/
// hardware) and emits a verdict per part and per mismatch. In provision it
// is the gate before anything is written: a mismatch fails the phase, so
// no firmware, wipe or install follows. In diagnostic and burn-in the
// mismatches are kept and fail the validate phase after the suite has run
// on what is there, so one run reports both.
func (e *Executor) runHardware(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		return failed("hardware: %v", err)
	}
	var raw []byte
	var name string
	switch mode {
	case modes.Provision, modes.Service:
		raw, name = a.GetManifestYaml(), a.GetManifestName()
	case modes.Diagnostic, modes.Burnin:
		raw, name = a.GetSkuYaml(), a.GetSkuName()
	case modes.Audit, modes.Verify, modes.Wipe, modes.Inspect:
		return failed("hardware: mode %s has no hardware check", mode)
	default:
		return failed("hardware: mode %s has no hardware check", mode)
	}
	if len(raw) == 0 {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: "hardware: the assignment carries no SKU (the node has none): nothing to compare"}
	}
	sku, err := manifests.ParseSKU(nonEmptyName(name), raw)
	if err != nil {
		return failed("hardware: %v", err)
	}
	h := sku.Spec.Hardware
	if h == nil {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: fmt.Sprintf("hardware: SKU %s declares no spec.hardware", sku.Metadata.Name)}
	}
	if len(h.NICs) > 0 && e.cfg.LinksUp != nil {
		// A port reports its speed only with carrier; CURE brought up the
		// boot port alone.
		n, err := e.cfg.LinksUp(ctx, e.cfg.LinkWait)
		if err != nil {
			emit.Log("WARN", fmt.Sprintf("hardware: bringing NIC ports up: %v", err), nil)
		} else if n > 0 {
			emit.Log("INFO", fmt.Sprintf("hardware: brought %d NIC ports up to read their link speed", n), nil)
		}
	}
	inv, err := e.cfg.Inventory(ctx)
	if err != nil && inv == nil {
		return failed("hardware: inventory: %v", err)
	}
	if err != nil {
		emit.Log("WARN", fmt.Sprintf("hardware: inventory incomplete: %v", err), nil)
	}
	e.setBootInventory(inv)
	vs := hardware.Compare(inv, h)
	withLog := e.kernelLogFor(ctx, emit)
	for _, v := range vs {
		v = withLog(v)
		emit.Verdict(&curev1.Verdict{Component: v.Component, Check: v.Check, Status: protoStatus(v.Status),
			Observed: v.Observed, Expected: v.Expected, Message: v.Message})
	}
	bad := hardware.Failures(vs)
	e.setHardwareFailures(bad)
	if len(bad) == 0 {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK,
			Message: fmt.Sprintf("hardware matches SKU %s (%d checks)", sku.Metadata.Name, len(vs))}
	}
	msg := fmt.Sprintf("hardware does not match SKU %s: %s", sku.Metadata.Name, summarize(bad))
	if mode == modes.Provision || mode == modes.Service {
		return failed("%s; nothing was written", msg)
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: msg + "; the suite runs on what is there and the run fails after it"}
}

func summarize(vs []checks.Verdict) string {
	parts := make([]string, 0, len(vs))
	for _, v := range vs {
		parts = append(parts, v.Component+" "+v.Message)
	}
	return strings.Join(parts, "; ")
}

func (e *Executor) setHardwareFailures(vs []checks.Verdict) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hwFailures = vs
}

func (e *Executor) hardwareFailures() []checks.Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hwFailures
}

// CollectInventory is Config.Inventory on a real node (or a fixture root).
func CollectInventory(root string, cfg inventory.Options) func(context.Context) (*curev1.Inventory, error) {
	cfg.Root = root
	return func(ctx context.Context) (*curev1.Inventory, error) {
		inv, _, err := inventory.Collect(ctx, cfg)
		return inv, err
	}
}
