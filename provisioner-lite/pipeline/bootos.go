package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// BootInstalledOS sends a node without an active run to its installed OS:
// the BMC's boot override to the disk (as a provision's set_boot_disk
// does), then a reset, or a power-on if the node is off. A diagnostic
// leaves the node in CURE by default; this is the way home. It is refused
// (ErrBusy) while the node has an active run, whose pipeline owns the
// node's boot; it returns what the BMC was asked to do.
func (e *Engine) BootInstalledOS(ctx context.Context, nodeID string) (string, error) {
	// No Start of the node in this instance while the BMC is at it.
	if _, dup := e.nodeStarts.LoadOrStore(nodeID, struct{}{}); dup {
		return "", fmt.Errorf("node %s: a run of the node is starting: %w", nodeID, ErrBusy)
	}
	defer e.nodeStarts.Delete(nodeID)
	switch r, err := e.cfg.Store.LatestRun(ctx, nodeID); {
	case err == nil && runstate.Active(r.Status):
		return "", fmt.Errorf("node %s: run %s is %s in %s; cancel it first (curectl cancel %s): %w",
			nodeID, r.ID, runstate.RunName(r.Status), nonEmpty(r.Phase, "no phase"), nodeID, ErrBusy)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("node %s: latest run: %w", nodeID, err)
	}
	var msg string
	err := e.power.withBMC(ctx, &store.Run{NodeID: nodeID}, func(ctx context.Context, b BMC) error {
		if err := b.SetBootOverride(ctx, redfish.BootTarget("Hdd"), false); err != nil {
			return fmt.Errorf("boot override to disk: %w", err)
		}
		state, err := b.PowerState(ctx)
		if err != nil {
			return fmt.Errorf("power state: %w", err)
		}
		if state == "Off" {
			msg = "boot override Hdd, Continuous; node was Off: powered On"
			return b.PowerOn(ctx)
		}
		msg = "boot override Hdd, Continuous; node was " + state + ": ForceRestart"
		return b.Reset(ctx, "ForceRestart")
	})
	if err != nil {
		return "", fmt.Errorf("node %s: boot the installed OS: %w", nodeID, err)
	}
	e.cfg.Log.Info("node sent to its installed OS", "node", nodeID, "bmc", msg)
	return msg, nil
}
