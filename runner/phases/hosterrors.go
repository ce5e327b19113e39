package phases

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/evidence"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/hwerrors"
	"github.com/cure-oss/cure/tools/kmsg"
	"github.com/cure-oss/cure/tools/mce"
)

// defaultMCEPoll is the machine-check poll interval during a validation
// run: the kernel's default (five minutes) would log a corrected error up
// to five minutes late, or after the run has ended; a poll reads a few
// MSRs per CPU.
const defaultMCEPoll = 5 * time.Second

// pollMachineChecks shortens the kernel's machine-check poll interval for
// the run and returns it (0 when the kernel has none, or it is off).
func (e *Executor) pollMachineChecks(emit agent.Emitter) time.Duration {
	if e.cfg.MCEPoll < 0 {
		return 0
	}
	d, err := mce.SetPollInterval(e.cfg.Root, e.cfg.MCEPoll)
	switch {
	case errors.Is(err, mce.ErrNoMCE):
		return 0
	case err != nil:
		emit.Log("WARN", fmt.Sprintf("hardware errors: %v (corrected machine checks surface at the kernel's own interval)", err), nil)
		return 0
	}
	emit.Log("INFO", fmt.Sprintf("hardware errors: the kernel polls every CPU's machine-check banks every %s during this run", d), nil)
	return d
}

// hostErrorVerdicts judges the boot's machine checks and EDAC counters
// after the suite, once the kernel has polled the banks one more time.
func (e *Executor) hostErrorVerdicts(ctx context.Context, poll time.Duration) []checks.Verdict {
	if poll > 0 {
		t := time.NewTimer(poll + time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	vs, err := hwerrors.CheckNode(ctx, hwerrors.Options{Root: e.cfg.Root})
	if err != nil {
		return []checks.Verdict{{Component: "host", Check: hwerrors.Check, Status: checks.Error, Message: err.Error()}}
	}
	return vs
}

// kernelLogFor returns a function that attaches, to a FAIL or ERROR
// verdict, the kernel log lines naming its component's device. The
// inventory is this boot's (the hardware phase's, else collected once).
func (e *Executor) kernelLogFor(ctx context.Context, emit agent.Emitter) func(checks.Verdict) checks.Verdict {
	var mu sync.Mutex // checks of a stage report at once
	var inv *curev1.Inventory
	return func(v checks.Verdict) checks.Verdict {
		if (v.Status != checks.Fail && v.Status != checks.Error) || v.Check == hwerrors.Check {
			return v
		}
		mu.Lock()
		defer mu.Unlock()
		if inv == nil {
			if inv = e.bootInventory(); inv == nil {
				var err error
				if inv, err = e.cfg.Inventory(ctx); inv == nil {
					emit.Log("WARN", fmt.Sprintf("kernel log evidence: inventory: %v", err), nil)
					inv = &curev1.Inventory{}
				}
				e.setBootInventory(inv)
			}
		}
		keys := evidence.For(v.Component, inv, e.cfg.Root)
		if keys.Empty() {
			return v
		}
		recs, err := kmsg.Read(filepath.Join(e.cfg.Root, "dev/kmsg"))
		if err != nil {
			return v
		}
		v.Message = evidence.Attach(v.Message, recs, keys)
		return v
	}
}

func (e *Executor) bootInventory() *curev1.Inventory {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inv
}

func (e *Executor) setBootInventory(inv *curev1.Inventory) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inv = inv
}
