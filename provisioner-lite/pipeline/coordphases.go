package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/retry"
)

// coordExecutors maps each coordinator-owned phase (the modes constants) to
// its executor. TestEveryPhaseHasExecutor checks every mode's plan against it.
var coordExecutors = map[modes.PhaseName]func(c *core, ctx context.Context, r *store.Run, phase modes.PhaseName) outcome{
	modes.Preflight: func(c *core, ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
		return c.checks.preflight(ctx, r)
	},
	modes.SetBootPXE: func(c *core, ctx context.Context, r *store.Run, ph modes.PhaseName) outcome {
		return c.power.setBootPXE(ctx, r, ph)
	},
	modes.PoweringOn: func(c *core, ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
		return c.power.powerOnOrCycle(ctx, r)
	},
	modes.WaitForCURE: func(c *core, ctx context.Context, r *store.Run, ph modes.PhaseName) outcome {
		return c.host.waitForCUREPhase(ctx, r, ph)
	},
	modes.BMC:  oobPhase,
	modes.BIOS: oobPhase,
	modes.HGX:  oobPhase,
	modes.BIOSSettings: func(c *core, ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
		return c.oob.biosSettings(ctx, r)
	},
	modes.SetBootDisk: func(c *core, ctx context.Context, r *store.Run, ph modes.PhaseName) outcome {
		return c.day2.setBootDiskAtEnd(ctx, r, ph)
	},
	modes.WaitForHostOS: func(c *core, ctx context.Context, r *store.Run, ph modes.PhaseName) outcome {
		return c.day2.waitForHostOSPhase(ctx, r, ph)
	},
	modes.PowerOffAtEnd: func(c *core, ctx context.Context, r *store.Run, ph modes.PhaseName) outcome {
		return c.day2.powerOffByPolicy(ctx, r, ph)
	},
}

func oobPhase(c *core, ctx context.Context, r *store.Run, phase modes.PhaseName) outcome {
	return c.oob.oobFirmware(ctx, r, string(phase)) // the phase names its firmware component
}

// coordPhase runs one coordinator-owned phase attempt. A phase with no
// executor is skipped, never passed (TestEveryPhaseHasExecutor keeps every
// plan's phases covered).
func (d *driverCtl) coordPhase(ctx context.Context, r *store.Run, phase modes.PhaseName) outcome {
	if run, ok := coordExecutors[phase]; ok {
		return run(d.core, ctx, r, phase)
	}
	return skipped("phase %s is not built yet", phase)
}

func (pw *powerCtl) setBootPXE(ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
	// Recorded before the BMC call: the boot server must hand out CURE to
	// the very next PXE request.
	bootgate.OpenWindow(r)
	pw.save(ctx, r)
	if err := pw.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		return b.SetBootOverride(ctx, pw.cfg.NetBoot, true)
	}); err != nil {
		return failed("one-time %s override: %v", pw.cfg.NetBoot, err)
	}
	return ok("boot override %s, Once", pw.cfg.NetBoot)
}

func (h *hostCtl) waitForCUREPhase(ctx context.Context, r *store.Run, phase modes.PhaseName) outcome {
	if r.Pipeline.Attempts(phase) > 1 {
		if err := h.power.rebootIntoCURE(ctx, r, "previous wait for CURE timed out"); err != nil {
			return failed("%v", err)
		}
	}
	return h.waitForCURE(ctx, r)
}

func (pw *powerCtl) setBootDisk(ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
	r.Pipeline.Boot = store.BootDisk
	pw.save(ctx, r)
	if err := pw.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		return b.SetBootOverride(ctx, redfish.BootTarget("Hdd"), false)
	}); err != nil {
		return failed("boot override to disk: %v", err)
	}
	return ok("boot override Hdd, Continuous")
}

func (pw *powerCtl) powerOffAtEnd(ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
	// The node goes back to the pool powered off, with no CURE boot armed.
	r.Pipeline.Boot = store.BootUnset
	pw.save(ctx, r)
	if err := pw.withBMC(ctx, r, func(ctx context.Context, b BMC) error { return b.PowerOff(ctx, false) }); err != nil {
		return failed("power off: %v", err)
	}
	return ok("powered off; node returned to the pool")
}

// withBMC opens a Redfish session for one step and always closes it: BMCs
// cap concurrent sessions, and a BMC reset invalidates them anyway.
func (pw *powerCtl) withBMC(ctx context.Context, r *store.Run, f func(context.Context, BMC) error) error {
	return pw.withBMCFor(ctx, r, 4*pw.cfg.Timeouts.BMCCall, f)
}

// withBMCFor is withBMC for an operation that waits on the BMC longer than a
// few calls (an update task, a BMC reset): budget bounds f.
func (pw *powerCtl) withBMCFor(ctx context.Context, r *store.Run, budget time.Duration, f func(context.Context, BMC) error) error {
	n, err := pw.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return err
	}
	// A BMC this run reset and nobody saw come back (the coordinator died
	// meanwhile) may be away for minutes yet: that is the reset's own
	// budget, not a failed phase attempt.
	resetAt := r.Pipeline.BMC.ResetAt
	pending := !resetAt.IsZero()
	connectUntil := time.Now().Add(pw.cfg.Timeouts.BMCCall)
	if pending {
		connectUntil = resetAt.Add(max(pw.cfg.Timeouts.BMCReset, pw.cfg.Timeouts.BMCCall))
	}
	var b BMC
	for {
		cctx, cancel := context.WithTimeout(ctx, pw.cfg.Timeouts.BMCCall)
		start := time.Now()
		b, err = pw.cfg.ConnectBMC(cctx, n)
		cancel()
		if err != nil {
			// The vendor is unknown until a login succeeds.
			pw.cfg.Metrics.RedfishCall("", "connect", time.Since(start), err)
		} else {
			b = metered(b, pw.cfg.Metrics)
			if mb, ok := b.(*meteredBMC); ok {
				mb.obs("connect", start, nil)
			}
		}
		if err == nil || !pending || time.Now().After(connectUntil) || ctx.Err() != nil {
			break
		}
		if serr := retry.Sleep(ctx, min(pw.cfg.Timeouts.BMCCall, 5*time.Second)); serr != nil {
			break
		}
	}
	if err != nil {
		if pending {
			return fmt.Errorf("bmc %s: not back from the reset requested at %s: %w", n.BMCURL, resetAt.Format(time.RFC3339), err)
		}
		if errors.Is(err, redfish.ErrLoginRefused) {
			return err // names the BMC already
		}
		return fmt.Errorf("bmc %s: %w", n.BMCURL, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pw.cfg.Timeouts.BMCCall)
		defer cancel()
		_ = b.Close(cctx)
	}()
	if pending {
		if err := b.WaitBMC(ctx, max(time.Until(connectUntil), pw.cfg.Timeouts.BMCCall)); err != nil {
			return fmt.Errorf("bmc %s: not back from the reset requested at %s: %w", n.BMCURL, resetAt.Format(time.RFC3339), err)
		}
		r.Pipeline.BMC.ResetAt = time.Time{}
		pw.save(ctx, r)
	}
	cctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if err := f(cctx, b); err != nil {
		return fmt.Errorf("bmc %s: %w", n.BMCURL, err)
	}
	return nil
}

func (ck *checkCtl) preflight(ctx context.Context, r *store.Run) outcome {
	n, err := ck.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return failed("%v", err)
	}
	if len(n.MACs) == 0 {
		return failedFinal(operatorFix, "node %s has no registered MAC: it cannot be PXE-booted", n.ID)
	}
	mode := r.Mode
	if mode == modes.Diagnostic || mode == modes.Burnin {
		_, doc, err := ck.cfg.Manifests.LoadDocument(r.Manifest)
		if err != nil {
			return failedFinal(operatorFix, "%v", err)
		}
		if doc.Suite == nil {
			return failedFinal(operatorFix, "mode %s needs a ValidationSuite; %s is a %s", mode, r.Manifest, doc.Kind)
		}
		if missing := ck.missingSitePrograms(doc.Suite); len(missing) > 0 {
			return failedFinal(operatorFix, "inputs do not resolve: %s; add each program with `provisioner-lite artifacts add --state-dir STATE FILE` (docs/VALIDATION.md, \"Writing a site check\")",
				strings.Join(missing, "; "))
		}
		return ck.preflightBMC(ctx, r, n, fmt.Sprintf("suite %s valid (%d checks)", r.Manifest, len(doc.Suite.Spec.Checks)))
	}
	_, sku, err := ck.cfg.Manifests.Load(r.Manifest)
	if err != nil {
		return failedFinal(operatorFix, "%v", err)
	}
	if out, stop := ck.day2.servicePreflight(ctx, r); stop {
		return out
	}
	ck.fetchArtifacts(ctx, mode, sku)
	missing, warnings := ck.localArtifacts(mode, sku)
	if len(missing) > 0 {
		return failedFinal(operatorFix, "inputs do not resolve: %s; add the image with `provisioner-lite artifacts add --state-dir STATE --sku %s.yaml FILE` (docs/SITE.md, step 5)",
			strings.Join(missing, "; "), r.Manifest)
	}
	if len(warnings) > 0 {
		// Say what the note means and what to do: a bare "needed only on
		// drift" read as an unexplained fault on every provision.
		ck.coordEvent(ctx, *r, modes.Preflight, runstate.EventLog, "WARN", fmt.Sprintf("SKU %s names firmware that is not in the artifact store (%s): "+
			"a node whose component already has the SKU's version does not need it and this run goes on; a node that differs would fail that firmware update. "+
			"Add the file with `provisioner-lite artifacts add --state-dir STATE FILE`, or remove the entry's artifact from the SKU to only check the version",
			r.Manifest, strings.Join(warnings, "; ")), 0)
	}
	inputs := "manifest " + r.Manifest + " valid"
	if mode == modes.Verify {
		verified, out := ck.verifyArtifacts(ctx, r, sku)
		if out != nil {
			return *out
		}
		inputs += verified
	}
	return ck.preflightBMC(ctx, r, n, inputs)
}

// localArtifacts checks the artifacts of sku a run in mode takes from the
// artifact store: missing are those it cannot do without, warnings those
// it needs only if a component drifts.
func (ck *checkCtl) localArtifacts(mode modes.Mode, sku *manifests.SKU) (missing, warnings []string) {
	check := func(what string, a *manifests.Artifact, required bool) {
		if a == nil || a.URL != "" {
			return // remote artifacts are fetched by the node; verify mode checks them
		}
		p := filepath.Join(ck.cfg.ArtifactDir, "sha256", a.SHA256)
		st, err := os.Stat(p)
		var problem string
		switch {
		case err != nil:
			problem = fmt.Sprintf("%s: sha256:%s not in the artifact store", what, a.SHA256)
		case st.Size() != a.Size:
			problem = fmt.Sprintf("%s: sha256:%s is %d bytes in the store, manifest says %d", what, a.SHA256, st.Size(), a.Size)
		default:
			return
		}
		if required {
			missing = append(missing, problem)
		} else {
			warnings = append(warnings, problem)
		}
	}
	if mode == modes.Provision && sku.Spec.OS != nil {
		check("os.image", &sku.Spec.OS.Image, true)
		// The chunk list always comes from this store (the runner fetches
		// it by its sha256 from the artifact base URL).
		if c := sku.Spec.OS.Image.Chunks; c != "" {
			if _, err := os.Stat(filepath.Join(ck.cfg.ArtifactDir, "sha256", c)); err != nil {
				missing = append(missing, fmt.Sprintf("os.image.chunks: chunk list sha256:%s not in the artifact store (`provisioner-lite artifacts add --sku` makes it)", c))
			}
		}
	}
	// A firmware image is only needed when its component drifts, which is not
	// known before the node is inventoried; verify mode exists to insist.
	if modes.FlashesFirmware(mode) || mode == modes.Verify {
		for _, fw := range sku.Spec.Firmware {
			check("firmware "+fw.Name, fw.Artifact, mode == modes.Verify)
		}
	}
	return missing, warnings
}

// fetchArtifacts asks FetchArtifact for the provision's OS image and
// chunk list where the store lacks them; what it cannot fetch the
// preflight then names as missing.
func (ck *checkCtl) fetchArtifacts(ctx context.Context, mode modes.Mode, sku *manifests.SKU) {
	if ck.cfg.FetchArtifact == nil || mode != modes.Provision || sku.Spec.OS == nil || sku.Spec.OS.Image.URL != "" {
		return
	}
	for _, h := range []string{sku.Spec.OS.Image.SHA256, sku.Spec.OS.Image.Chunks} {
		if h == "" {
			continue
		}
		if err := ck.cfg.FetchArtifact(ctx, h); err != nil {
			ck.cfg.Log.Warn("artifact not fetched from a peer instance or mirror", "sha256", h, "err", err)
		}
	}
}

// verifyArtifacts downloads and hashes every artifact a provision would
// use, each with its verdict: what to add to the preflight's message, or
// the failed outcome.
func (ck *checkCtl) verifyArtifacts(ctx context.Context, r *store.Run, sku *manifests.SKU) (string, *outcome) {
	bad := 0
	arts := map[string]*manifests.Artifact{}
	for _, fw := range sku.Spec.Firmware {
		if fw.Artifact != nil {
			arts["firmware/"+fw.Name] = fw.Artifact
		}
	}
	if sku.Spec.OS != nil {
		arts["os/image"] = &sku.Spec.OS.Image
	}
	for _, name := range sortedArtifactNames(arts) {
		a := arts[name]
		err := ck.verifyArtifact(ctx, a)
		status, msg := curev1.VerdictStatus_PASS, "sha256 and size verified"
		if err != nil {
			status, msg = curev1.VerdictStatus_FAIL, err.Error()
			bad++
		}
		ck.verdict(ctx, r, name, "artifact", status, fmt.Sprintf("%d bytes", a.Size), "sha256:"+a.SHA256, msg)
	}
	if bad > 0 {
		out := failed("%d of %d artifacts failed verification", bad, len(arts))
		return "", &out
	}
	return fmt.Sprintf(", %d artifacts downloaded and verified", len(arts)), nil
}

// missingSitePrograms names the suite's site programs the artifact store
// does not hold at their pinned size (one with its own url is the node's
// to fetch): the node would only ERROR on each.
func (ck *checkCtl) missingSitePrograms(s *manifests.ValidationSuite) []string {
	var out []string
	for _, c := range s.Spec.Checks {
		p := c.Program
		if p == nil || p.URL != "" {
			continue
		}
		st, err := os.Stat(filepath.Join(ck.cfg.ArtifactDir, "sha256", p.SHA256))
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("site check %s: program sha256:%s not in the artifact store", c.Name, p.SHA256))
		case st.Size() != p.Size:
			out = append(out, fmt.Sprintf("site check %s: program sha256:%s is %d bytes in the store, the suite says %d", c.Name, p.SHA256, st.Size(), p.Size))
		}
	}
	return out
}

// operatorFix is why a preflight failure is not retried: what is missing
// or wrong is the site's configuration, which no retry changes; once fixed,
// `curectl provision --resume` starts the run again from preflight.
const operatorFix = "not retried: the site configuration must change first; then curectl provision --resume NODE"

// maxArtifact bounds an artifact the coordinator verifies before a run:
// it is streamed through sha256, never held, so only sanity limits it.
const maxArtifact = 1 << 40

// verifyArtifact reads an artifact whole (from the store, or its URL) and
// checks its size and sha256.
func (ck *checkCtl) verifyArtifact(ctx context.Context, a *manifests.Artifact) error {
	want := artifact.Want{Size: a.Size, SHA256: a.SHA256}
	if a.URL != "" {
		return artifact.Fetcher{Timeout: 30 * time.Minute, Limit: maxArtifact}.Check(ctx, a.URL, want)
	}
	p := filepath.Join(ck.cfg.ArtifactDir, "sha256", a.SHA256)
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := artifact.Verify(f, want, nil); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

func sortedArtifactNames(m map[string]*manifests.Artifact) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// preflightBMC is the last gate: the BMC answers before anything is touched.
func (ck *checkCtl) preflightBMC(ctx context.Context, r *store.Run, n store.Node, inputs string) outcome {
	var state string
	if err := ck.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		var err error
		state, err = b.PowerState(ctx)
		return err
	}); err != nil {
		if errors.Is(err, redfish.ErrLoginRefused) {
			return failed("%v", err)
		}
		return failed("BMC unreachable: %v", err)
	}
	return ok("node %s, %d MACs, %s, BMC reachable (power %s)", n.ID, len(n.MACs), inputs, state)
}

// powerOnOrCycle powers the node on, or resets it if it is on, once per
// run: the action is recorded with its time, so a coordinator that stops
// before the phase's end is recorded does not power-cycle a booting node.
func (pw *powerCtl) powerOnOrCycle(ctx context.Context, r *store.Run) outcome {
	if p := r.Pipeline.PowerOn; !p.At.IsZero() {
		return ok("%s at %s (recorded; not repeated)", p.Msg, p.At.Format(time.RFC3339))
	}
	var msg string
	err := pw.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		state, err := b.PowerState(ctx)
		if err != nil {
			return err
		}
		if state == "On" {
			msg = "node was On: ForceRestart into PXE"
			return b.Reset(ctx, "ForceRestart")
		}
		msg = "node was " + state + ": powered On"
		return b.PowerOn(ctx)
	})
	if err != nil {
		return failed("%v", err)
	}
	r.Reboots++
	r.Pipeline.BootRequestedAt = time.Now().UTC()
	r.Pipeline.PowerOn = store.PowerAction{At: r.Pipeline.BootRequestedAt, Msg: msg}
	pw.save(ctx, r)
	return ok("%s", msg)
}

// rebootIntoCURE re-arms the one-time PXE override (the last boot consumed
// it) and resets the host.
func (pw *powerCtl) rebootIntoCURE(ctx context.Context, r *store.Run, why string) error {
	bootgate.OpenWindow(r)
	pw.save(ctx, r)
	err := pw.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		// A coordinator stop must not cut the sequence: a reset the BMC did
		// whose answer was cut would go unrecorded, and the resumed run
		// would reboot the node again. It keeps withBMC's budget.
		ctx, cancel := uncancelled(ctx)
		defer cancel()
		if err := b.SetBootOverride(ctx, pw.cfg.NetBoot, true); err != nil {
			return err
		}
		// Many BMCs refuse ForceRestart on a host that is off (a resumed
		// run may find it so): power it on instead.
		if state, err := b.PowerState(ctx); err == nil && state == "Off" {
			return b.PowerOn(ctx)
		}
		return b.Reset(ctx, "ForceRestart")
	})
	if err != nil {
		return fmt.Errorf("reboot into CURE (%s): %w", why, err)
	}
	r.Reboots++
	r.Pipeline.BootRequestedAt = time.Now().UTC()
	pw.save(ctx, r)
	pw.coordEvent(ctx, *r, r.Phase, runstate.EventInfo, "", "re-armed PXE once and reset the host: "+why, 0)
	return nil
}

// uncancelled is ctx without its cancellation but with its deadline.
func uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

// waitForCURE waits for this run's runner to register, until the
// attempt's deadline (set when it began waiting).
func (h *hostCtl) waitForCURE(ctx context.Context, r *store.Run) outcome {
	if r.Pipeline.Phase(modes.WaitForCURE).Deadline.IsZero() {
		r.Pipeline.SetDeadline(modes.WaitForCURE, time.Now().Add(h.cfg.Timeouts.WaitForCURE))
		h.save(ctx, r)
	}
	h.boot.WaitForCURE(*r)
	defer h.boot.EndWaitForCURE(r.ID)
	// The run's signal wakes the wait when an import updates the node
	// (server.AddNodes); the periodic look catches one made through
	// another instance.
	signal, unsub := h.cfg.Store.Signals().Subscribe(r.ID)
	defer unsub()
	for {
		q := h.watch(r.NodeID).withEvents(signal)
		obs := cureObs{now: time.Now(), session: h.cfg.Hub.Current(r.NodeID)}
		if n, err := h.cfg.Store.GetNode(ctx, r.NodeID); err == nil {
			obs.macs = n.MACs
		}
		next, acts := decideWaitCURE(*r, h.cfg.Timeouts.WaitForCURE, obs)
		changed := !slices.Equal(next.Pipeline.CUREMACs, r.Pipeline.CUREMACs)
		*r = next
		if changed {
			h.save(ctx, r)
		}
		if out, end := h.applyWait(ctx, r, acts); end {
			return out
		}
		at := r.Pipeline.Phase(modes.WaitForCURE).Deadline
		if recheck := obs.now.Add(cureMACRecheck); recheck.Before(at) {
			at = recheck
		}
		if err := q.until(ctx, at); err != nil {
			return failed("%v", err)
		}
	}
}

// cureMACRecheck is how often a wait for CURE reads the node's MACs again
// without being told they changed (an import through another instance).
const cureMACRecheck = 30 * time.Second

// applyWait carries out the actions of a coordinator phase's wait: end
// says the attempt ended, with out.
func (h *hostCtl) applyWait(ctx context.Context, r *store.Run, acts []action) (out outcome, end bool) {
	for _, a := range acts {
		switch a.kind {
		case actDone:
			return ok("%s", a.msg), true
		case actFail:
			return failed("%s", a.msg), true
		case actEndBootWindow:
			// Tokens minted for this boot and never used die with the wait.
			if err := h.cfg.Store.EndBootWindow(context.WithoutCancel(ctx), r.ID, bootgate.Window(*r)); err != nil {
				h.cfg.Log.Error("end boot window", "run", r.ID, "err", err)
			}
		case actNote:
			h.coordNote(ctx, *r, a.phase, a.msg)
		case actRebootCURE:
			if err := h.power.rebootIntoCURE(ctx, r, a.msg); err != nil {
				return failed("%v", err), true
			}
		case actRebootOutOfCURE:
			if err := h.hostReboot(ctx, r); err != nil {
				return failed("%v", err), true
			}
		case actOrderReboot:
			if s := h.cfg.Hub.Current(r.NodeID); s != nil && s.RunID == r.ID {
				if _, _, err := h.orderReboot(ctx, s, "os installed; boot the installed OS"); err != nil {
					return failed("stopped"), true
				}
			}
		case actRequeue:
			return outcome{}, false
		case actRecordStart, actRecordEnd, actEvent, actRetry, actAssign, actReattach, actLost, actPairSend:
			panic(fmt.Sprintf("pipeline: wait decision asked for batch action %s", a.kind))
		default:
			panic(fmt.Sprintf("pipeline: wait decision asked for action %s", a.kind))
		}
	}
	return outcome{}, false
}

// GateVerdict is the coordinator's verdict status (MATCH, DRIFT or ERROR)
// and message for one inventory member running version running against fw:
// fwplan.Gate, the judgement every kind of both sides makes.
// TestVersionFormsAgree holds it to the runner's answer.
func GateVerdict(fw manifests.Firmware, running string) (status curev1.VerdictStatus, msg string) {
	j := fwplan.Gate(&fw, running)
	return j.Status, j.Message
}

// ConfirmVerdict is the coordinator's verdict status (PASS, FAIL or ERROR)
// and message for a member running version running after its update:
// fwplan.Confirm, the judgement both sides make after a flash
// (TestOneFirmwarePlanner holds it to the runner's).
func ConfirmVerdict(fw manifests.Firmware, running string) (status curev1.VerdictStatus, msg string) {
	j := fwplan.Confirm(&fw, running)
	return j.Status, j.Message
}

// verdict records a coordinator-side verdict. Its text comes partly from the
// BMC (inventory ids, versions, task messages): cleaned and bounded like a
// runner's.
func (c *core) verdict(ctx context.Context, r *store.Run, component, check string, status curev1.VerdictStatus, observed, expected, msg string) {
	if err := c.cfg.Store.PutVerdict(context.WithoutCancel(ctx), store.Verdict{
		RunID: r.ID, Component: textsafe.BoundedLine(component, 128), Check: check, Status: status,
		Observed: textsafe.Bounded(observed, 1024), Expected: textsafe.Bounded(expected, 1024), Message: textsafe.Bounded(msg, 4096), Time: time.Now().UTC(),
	}); err != nil {
		c.cfg.Log.Error("store verdict", "err", err)
	}
}

// waitForHostOS reboots the node out of CURE and waits for the installed OS
// to phone home. The wait is anchored on an event id in the run's status
// so that a coordinator restart in the middle keeps waiting for the same
// callback.
func (h *hostCtl) waitForHostOS(ctx context.Context, r *store.Run) outcome {
	signal, unsub := h.cfg.Store.Signals().Subscribe(r.ID)
	defer unsub()
	var readTo int64
	for {
		q := h.watch(r.NodeID).withEvents(signal)
		obs, err := h.observeHost(ctx, r, &readTo)
		if err != nil {
			return failed("%v", err)
		}
		next, acts := decideHostOS(*r, h.cfg.Timeouts.HostOS, obs)
		*r = next
		h.save(ctx, r)
		out, end := h.applyWait(ctx, r, acts)
		if end {
			return out
		}
		if len(acts) > 0 && acts[len(acts)-1].kind == actRequeue {
			continue
		}
		if err := q.until(ctx, hostNextLook(*r, time.Now())); err != nil {
			return failed("%v", err)
		}
	}
}

// hostLookEvery bounds the time between looks at the wait for the
// installed OS when nothing wakes it: the callback event wakes it anyway.
const hostLookEvery = 5 * time.Second

// hostNextLook is when the wait for the installed OS looks again unwoken:
// at its stored deadline, or sooner.
func hostNextLook(r store.Run, now time.Time) time.Time {
	next := now.Add(hostLookEvery)
	if d := r.Pipeline.Phase(modes.WaitForHostOS).Deadline; !d.IsZero() && d.Before(next) {
		return d
	}
	return next
}

// observeHost looks at the wait for the installed OS: the run's CURE
// session, if one is connected, and the events since the wait's cursor
// that earlier looks did not read (readTo: the last one they read).
func (h *hostCtl) observeHost(ctx context.Context, r *store.Run, readTo *int64) (hostObs, error) {
	obs := hostObs{now: time.Now()}
	if s := h.cfg.Hub.Current(r.NodeID); s != nil && s.RunID == r.ID {
		obs.cure = s
	}
	var err error
	if r.Pipeline.Host.RebootAttempt != r.Pipeline.Attempts(modes.WaitForHostOS) {
		obs.tail, err = h.lastEventID(ctx, r.ID)
		return obs, err
	}
	from := max(r.Pipeline.Host.WaitFrom, *readTo)
	if obs.events, err = h.cfg.Store.Events(ctx, r.ID, from, maxEventsPerLook); err == nil && len(obs.events) > 0 {
		*readTo = obs.events[len(obs.events)-1].ID
	}
	return obs, err
}

// hostReboot reboots the node out of CURE for the current attempt of the
// wait and records it; the wait's deadline runs from then.
func (h *hostCtl) hostReboot(ctx context.Context, r *store.Run) error {
	rebooted, err := h.rebootOutOfCURE(ctx, r)
	if err != nil {
		return err
	}
	r.Pipeline.Host.RebootAttempt = r.Pipeline.Attempts(modes.WaitForHostOS)
	r.Pipeline.Host.RebootedAt = rebooted.UTC()
	r.Pipeline.SetDeadline(modes.WaitForHostOS, time.Now().Add(h.cfg.Timeouts.HostOS))
	h.save(ctx, r)
	return nil
}

// rebootOutOfCURE asks the runner to reboot (it drains its events first);
// a runner that does not go away in time is reset through the BMC. Either
// way the run's CURE session is over when it returns: the coordinator
// ordered the reboot, so it does not wait for the network to notice (a
// machine that resets sends no FIN; the stream would linger until a
// keepalive fails, tens of seconds after the installed OS is up).
func (h *hostCtl) rebootOutOfCURE(ctx context.Context, r *store.Run) (time.Time, error) {
	graceful := false
	var at time.Time // the reset, as near as the coordinator can tell
	if s := h.cfg.Hub.Current(r.NodeID); s != nil && s.RunID == r.ID {
		var err error
		if at, graceful, err = h.orderReboot(ctx, s, "os installed; boot the installed OS"); err != nil {
			return time.Time{}, err
		}
	}
	if !graceful {
		if err := h.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
			return b.Reset(ctx, "ForceRestart")
		}); err != nil {
			return time.Time{}, fmt.Errorf("reset into the installed OS: %w", err)
		}
		at = time.Now()
	}
	r.Reboots++
	h.save(ctx, r)
	how := "runner rebooted itself"
	if !graceful {
		how = "BMC ForceRestart"
	}
	h.coordEventAt(ctx, *r, at, modes.WaitForHostOS, runstate.EventInfo, "", "rebooting into the installed OS: "+how, 0)
	return at, nil
}

// rebootDrainQuiet is how long a runner told to reboot must have sent
// nothing before its events count as drained: it sends what was not yet
// acknowledged, waits for the acks, then resets the machine.
const rebootDrainQuiet = 500 * time.Millisecond

// orderReboot tells the runner of s to reboot and ends s once the runner
// has drained (its stream ended, or it fell silent for rebootDrainQuiet),
// reporting true and when it went silent (its reset follows at once); a
// runner still talking after ShutdownWait has its session ended too,
// reporting false (the caller resets it through the BMC). From then on
// the coordinator holds the session for ended: a reconnect of the same
// boot is a new session, and the host callback is refused while it is
// connected.
func (h *hostCtl) orderReboot(ctx context.Context, s *sessions.Session, reason string) (time.Time, bool, error) {
	sent := time.Now()
	if err := s.Send(rebootMsg(reason)); err != nil {
		h.cfg.Hub.Detach(s)
		return time.Time{}, false, nil
	}
	giveUp := time.NewTimer(h.cfg.Timeouts.ShutdownWait)
	defer giveUp.Stop()
	tick := time.NewTicker(rebootDrainQuiet / 5)
	defer tick.Stop()
	silentSince := func() time.Time {
		if last := s.LastReceived(); last.After(sent) {
			return last
		}
		return sent
	}
	for {
		select {
		case <-s.Done():
			h.cfg.Hub.Detach(s)
			return silentSince(), true, nil
		case <-ctx.Done():
			return time.Time{}, false, errStopped
		case <-giveUp.C:
			h.cfg.Hub.Detach(s)
			return time.Time{}, false, nil
		case now := <-tick.C:
			if last := silentSince(); now.Sub(last) >= rebootDrainQuiet {
				h.cfg.Hub.Detach(s)
				return last, true, nil
			}
		}
	}
}

func (h *hostCtl) lastEventID(ctx context.Context, runID string) (int64, error) {
	return h.cfg.Store.LastEventID(ctx, runID)
}
