package phases

import (
	"context"
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/wipe"
)

// DiskWiper erases one disk per a wipe policy and proves it: open, probe
// (Opal discovery, NVMe capabilities), plan, execute, verify (tools/wipe).
type DiskWiper func(ctx context.Context, disk blockdev.Disk, batch []string, p wipe.Policy, cred wipe.Credentials) (*wipe.Result, error)

// RealDiskWiper wipes through the real device seams under sysRoot.
func RealDiskWiper(sysRoot string) DiskWiper {
	return func(ctx context.Context, disk blockdev.Disk, batch []string, p wipe.Policy, cred wipe.Credentials) (*wipe.Result, error) {
		dev, err := wipe.Open(disk, sysRoot)
		if err != nil {
			return nil, err
		}
		defer dev.Close()
		t, err := wipe.Probe(disk, &dev.Handles, dev.NVMe, batch)
		if err != nil {
			return nil, err
		}
		plan, err := wipe.PlanWipe(t, p)
		if err != nil {
			return nil, err
		}
		// runSEDRevert calls a DiskWiper only after modes.CheckWipe passed:
		// that is the grant the device library asks for.
		return wipe.Execute(ctx, plan, dev.Handles, cred, wipe.Options{AllowDestructive: true})
	}
}

// runSEDRevert erases the disks the manifest's wipe policy selects, one
// verdict per disk with method, duration and evidence. The selection refuses
// the boot medium and ambiguity before any disk is opened.
func (e *Executor) runSEDRevert(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	sku, err := e.sku(a)
	if err != nil {
		return failed("sed_revert: %v", err)
	}
	w := sku.Spec.Wipe
	if w == nil || w.Policy == wipe.PolicyNone {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: "manifest wipe policy is none: no disk erased"}
	}
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		return failed("sed_revert: %v", err)
	}
	if err := modes.CheckWipe(mode); err != nil {
		return failed("sed_revert: %v", err)
	}
	if e.cfg.Wipe == nil || e.cfg.Disks == nil {
		return failed("sed_revert: runner has no disk wiper configured")
	}
	disks, err := e.cfg.Disks()
	if err != nil {
		return failed("sed_revert: listing disks: %v", err)
	}
	sel := blockdev.Selector{Transport: w.Disks.Transport, Model: w.Disks.Model, Serial: w.Disks.Serial, Name: w.Disks.Name,
		MinSize: uint64(w.Disks.MinSize), MaxSize: uint64(w.Disks.MaxSize)}
	targets, err := wipe.SelectTargets(disks, sel)
	if err != nil {
		return failed("sed_revert: %v", err)
	}
	batch := wipe.Names(targets)
	policy := wipe.Policy{Method: w.Policy, AllowWeakerFallback: w.AllowWeakerFallback}
	var problems, done []string
	for _, d := range targets {
		cred := wipe.Credentials{PSID: a.GetPsids()[d.Serial]}
		res, err := e.cfg.Wipe(ctx, d, batch, policy, cred)
		e.setZeroed(d, err == nil && res != nil && res.Verified && res.ReadsZeros)
		v := &curev1.Verdict{Component: "disk/" + d.Name, Check: "wipe", Expected: "policy " + w.Policy + ", marker gone"}
		if err != nil {
			v.Status = curev1.VerdictStatus_FAIL
			v.Message = err.Error()
			if res != nil {
				v.Observed = string(res.Method)
				v.Message += " | " + strings.Join(res.Evidence, "; ")
			}
			problems = append(problems, d.Name+": "+err.Error())
		} else {
			v.Status = curev1.VerdictStatus_PASS
			v.Observed = fmt.Sprintf("%s in %s, verified=%t", res.Method, res.Erase.Round(1e6), res.Verified)
			v.Message = strings.Join(res.Evidence, "; ")
			done = append(done, fmt.Sprintf("%s (%s)", d.Name, res.Method))
		}
		emit.Verdict(v)
	}
	if len(problems) > 0 {
		return failed("sed_revert: %s", strings.Join(problems, "; "))
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: "erased and verified: " + strings.Join(done, ", ")}
}
