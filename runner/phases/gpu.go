package phases

import (
	"context"

	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/gpu/driver"
)

// The gpu checks themselves are built by tools/checks/gpucheck, beside the
// other checks; what stays here is bringing the driver up, which is the
// runner's (its state lives for the boot, its steps go to the run's log).

// gpuDriverUp returns gpucheck.Checks.Prepare: the image's GPU driver bundle
// brought up (modules in dependency order, then the fabric manager on
// NVSwitch systems), each step logged to the run. Once up it stays up for
// the boot; a failure is tried again by the next GPU check (Ensure plans
// only what is still missing).
func (e *Executor) gpuDriverUp(emit agent.Emitter) func(context.Context) error {
	if e.cfg.GPUDriver.Load == nil || e.cfg.GPUDriver.Start == nil {
		return nil
	}
	return func(ctx context.Context) error {
		e.gpuMu.Lock()
		defer e.gpuMu.Unlock()
		if e.gpuUp {
			return nil
		}
		acts, err := driver.Ensure(ctx, e.cfg.Root, e.cfg.GPUDriver)
		for _, a := range acts {
			emit.Log("INFO", "gpu driver: "+a.String(), nil)
		}
		e.gpuUp = err == nil
		return err
	}
}
