package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"log/slog"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/retry"
)

// errStopped means the coordinator is shutting down: the run stays active in
// the store and the next coordinator resumes it.
var errStopped = errors.New("coordinator stopping")

// outcome is the result of one phase attempt.
type outcome struct {
	status curev1.PhaseStatus // ok, skipped or failed
	msg    string
	// noRetry, on a failure, says why another attempt cannot help (the
	// run fails at once).
	noRetry string
}

func ok(format string, a ...any) outcome {
	return outcome{status: curev1.PhaseStatus_PHASE_OK, msg: fmt.Sprintf(format, a...)}
}
func skipped(format string, a ...any) outcome {
	return outcome{status: curev1.PhaseStatus_PHASE_SKIPPED, msg: fmt.Sprintf(format, a...)}
}

// failed is a failed attempt. An error among a that no retry can change
// (a refused BMC login) makes it final.
func failed(format string, a ...any) outcome {
	o := outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: fmt.Sprintf(format, a...)}
	for _, x := range a {
		if err, isErr := x.(error); isErr && errors.Is(err, redfish.ErrLoginRefused) {
			o.noRetry = "a refused BMC login is not retried: each try counts toward locking the account on a real BMC"
		}
	}
	return o
}

// failedFinal is a failure another attempt cannot change: why says so.
func failedFinal(why, format string, a ...any) outcome {
	return outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: fmt.Sprintf(format, a...), noRetry: why}
}

// drive runs one run's remaining phases.
func (d *driverCtl) drive(ctx context.Context, runID string) {
	r, ok := d.loadRun(ctx, runID)
	if !ok {
		return
	}
	log := d.cfg.Log.With("run", r.ID, "node", r.NodeID)
	d.cfg.Metrics.RunStarted(r.Mode)
	defer d.cfg.Metrics.RunStopped(r.Mode)
	plan, err := modes.For(r.Mode)
	if err != nil {
		d.finish(ctx, &r, curev1.RunStatus_RUN_FAILED, err.Error())
		return
	}
	from := max(plan.Index(r.Phase), 0)
	for {
		step := nextStep(plan, r.CompletedPhases, from)
		goOn := false
		switch {
		case step.done:
			d.complete(ctx, &r)
			return
		case len(step.batch) > 0:
			goOn = d.driveBatch(ctx, &r, step.batch, log)
		default:
			goOn = d.driveCoord(ctx, &r, step.phase)
		}
		if !goOn {
			return
		}
	}
}

// loadRun reads a run to drive: false when it is not to be driven (ended
// meanwhile, or its status is unreadable: then it ends in attention).
func (d *driverCtl) loadRun(ctx context.Context, runID string) (store.Run, bool) {
	r, err := d.cfg.Store.GetRun(ctx, runID)
	if err != nil {
		d.cfg.Log.Error("load run", "run", runID, "err", err)
		return r, false
	}
	if !runstate.Active(r.Status) {
		return r, false // ended meanwhile (e.g. its identity was contested)
	}
	if why := r.Pipeline.Malformed; why != "" {
		// Misreading it (an attempt count as 0, a pending BMC reset as
		// none) would repeat or skip work: an operator looks first.
		d.finish(ctx, &r, curev1.RunStatus_RUN_ATTENTION, why)
		return r, false
	}
	if r.Pipeline.RunnerAddr != d.cfg.RunnerAddr {
		// This instance drives the run now: runners are sent here first.
		r.Pipeline.RunnerAddr = d.cfg.RunnerAddr
		d.save(ctx, &r)
	}
	return r, true
}

// step is what a run does next: a batch of in-band phases, one
// coordinator phase, or nothing (done).
type step struct {
	batch []modes.PhaseName
	phase modes.PhaseName
	done  bool
}

// nextStep is the first phase of plan from index from that is not
// completed, with the in-band phases that follow it when the runner owns it.
func nextStep(plan modes.Plan, completed []modes.PhaseName, from int) step {
	for i := from; i < len(plan.Phases); i++ {
		ph := plan.Phases[i]
		if slices.Contains(completed, ph.Name) {
			continue
		}
		if ph.Owner != modes.Runner {
			return step{phase: ph.Name}
		}
		var batch []modes.PhaseName
		for j := i; j < len(plan.Phases) && plan.Phases[j].Owner == modes.Runner; j++ {
			if !slices.Contains(completed, plan.Phases[j].Name) {
				batch = append(batch, plan.Phases[j].Name)
			}
		}
		return step{batch: batch}
	}
	return step{done: true}
}

// driveBatch runs a batch of in-band phases (with the BMC's sensors polled
// during a suite's validate phase); false when the run stops.
func (d *driverCtl) driveBatch(ctx context.Context, r *store.Run, batch []modes.PhaseName, log *slog.Logger) bool {
	stopTelemetry := d.bmc.startBMCTelemetry(ctx, r, batch)
	failedPhase, msg, err := d.batch.runnerPhases(ctx, r, batch, log)
	stopTelemetry()
	if validating(r, batch) && !errors.Is(err, errStopped) && ctx.Err() == nil {
		d.bmc.collectBMCEvidence(ctx, r)
	}
	if err != nil {
		if !errors.Is(err, errStopped) && ctx.Err() == nil {
			d.finish(ctx, r, curev1.RunStatus_RUN_ATTENTION, err.Error())
		}
		return false
	}
	if failedPhase == "" {
		return true
	}
	cause := metrics.CausePhaseFailed
	if strings.HasPrefix(msg, noPhaseEnd) {
		cause = metrics.CausePhaseTimeout
	}
	return d.retryAllowed(ctx, r, failedPhase, cause, outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: msg})
}

// driveCoord runs one attempt of a coordinator phase; false when the run
// stops.
func (d *driverCtl) driveCoord(ctx context.Context, r *store.Run, phase modes.PhaseName) bool {
	started := time.Now()
	d.begin(ctx, r, phase, runstate.SourceCoordinator)
	out := d.coordPhase(ctx, r, phase)
	if ctx.Err() != nil {
		return false
	}
	d.end(ctx, r, phase, out, time.Since(started), runstate.SourceCoordinator)
	if out.status == curev1.PhaseStatus_PHASE_FAILED {
		return d.retryAllowed(ctx, r, phase, coordCause(phase), out)
	}
	return true
}

// complete ends a run whose phases are all done: succeeded, unless the
// coordinator's judgement of its results fails it (gate).
func (d *driverCtl) complete(ctx context.Context, r *store.Run) {
	if msg := d.fleet.gate(ctx, r); msg != "" {
		d.finish(ctx, r, curev1.RunStatus_RUN_FAILED, msg)
		return
	}
	r.Pipeline.Boot = store.BootUnset
	d.finish(ctx, r, curev1.RunStatus_RUN_SUCCEEDED, "all phases done")
}

// coordCause is the retry cause of a failed coordinator phase.
func coordCause(phase modes.PhaseName) string {
	switch phase {
	case modes.WaitForCURE:
		return metrics.CauseCUREBoot
	case modes.WaitForHostOS:
		return metrics.CauseHostOS
	case modes.Preflight:
		return metrics.CausePhaseFailed
	case modes.SetBootPXE, modes.PoweringOn, modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX, modes.SetBootDisk, modes.PowerOffAtEnd:
		// The BMC's work.
	case modes.Hardware, modes.NIC, modes.DPU, modes.NVMe, modes.SEDRevert, modes.OSInstall, modes.Validate:
		// The runner's: never a coordinator phase.
	}
	return metrics.CauseBMC
}

// retryAllowed counts a phase failure against the budget; when spent, or
// when the failure is final, the run ends failed with the phase it reached,
// so a later resume restarts there.
func (d *driverCtl) retryAllowed(ctx context.Context, r *store.Run, phase modes.PhaseName, cause string, out outcome) bool {
	r.PhaseFailures++
	attempts := r.Pipeline.Attempts(phase)
	if why := retryRefused(phase, attempts, d.cfg.Budgets.PhaseAttempts, out); why != "" {
		d.finish(ctx, r, curev1.RunStatus_RUN_FAILED, why)
		return false
	}
	d.cfg.Metrics.Retry(phase, cause)
	d.save(ctx, r)
	// Full jitter: a rack whose switch flapped does not retry in lockstep.
	delay := retry.Policy{Base: d.cfg.Timeouts.RetryBase, Max: d.cfg.Timeouts.RetryMax}.Delay(attempts)
	d.coordEvent(ctx, *r, phase, runstate.EventInfo, "", fmt.Sprintf("phase %s failed (attempt %d of %d), retrying in %s: %s", phase, attempts, d.cfg.Budgets.PhaseAttempts, delay.Round(time.Millisecond), out.msg), 0)
	return retry.Sleep(ctx, delay) == nil
}

// retryRefused is why a failed attempt of phase gets no other ("" when it
// does): its failure is final, or its attempts used the budget.
func retryRefused(phase modes.PhaseName, attempts, budget int, out outcome) string {
	switch {
	case out.noRetry != "":
		return fmt.Sprintf("phase %s failed: %s (%s)", phase, out.msg, out.noRetry)
	case attempts >= budget:
		return fmt.Sprintf("phase %s failed %d times (budget %d): %s", phase, attempts, budget, out.msg)
	}
	return ""
}

func (c *core) save(ctx context.Context, r *store.Run) {
	// The store write must land even while shutting down, or a resume would
	// repeat a phase that already finished.
	err := saveRun(ctx, c.cfg.Store.UpdateRun, *r, c.cfg.Log, saveRetry)
	if leaseLost(err) {
		c.leases.abandon(r.ID)
	}
}

// saveRetry is how a run's write the store did not take is tried again.
var saveRetry = retryPlan{attempts: 6, timeout: 10 * time.Second, backoff: time.Second}

type retryPlan struct {
	attempts         int
	timeout, backoff time.Duration
}

// saveRun writes the run, trying again while the store fails for a reason
// that can pass (its queue behind a slow commit on a saturated machine): the
// run in memory and its row must not part, or a run that ended stays
// "running" in the store, for the fleet view and for a resume. A lost lease,
// an unknown run or a closed store are answered at once. It returns the last
// error, logged.
func saveRun(ctx context.Context, update func(context.Context, store.Run) error, r store.Run, log *slog.Logger, p retryPlan) error {
	var err error
	for attempt := 1; attempt <= p.attempts; attempt++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		err = update(wctx, r)
		cancel()
		if err == nil || leaseLost(err) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrClosed) {
			break
		}
		log.Error("store run", "run", r.ID, "attempt", attempt, "of", p.attempts, "err", err)
		if ctx.Err() != nil && attempt >= 2 {
			break // shutting down: one more try, not the whole plan
		}
		if attempt < p.attempts {
			time.Sleep(time.Duration(attempt) * p.backoff)
		}
	}
	if err != nil && !leaseLost(err) {
		log.Error("store run: gave up", "run", r.ID, "status", r.Status.String(), "err", err)
	}
	return err
}

// begin starts a coordinator phase's attempt and records it. An attempt
// the run's status shows started and not ended was cut short by a stop of
// the coordinator: it continues, with its attempt count, start and
// deadline, and each phase decides from its own stored status what is
// left to do.
func (d *driverCtl) begin(ctx context.Context, r *store.Run, phase modes.PhaseName, source runstate.EventSource) {
	if r.Phase == phase && r.Pipeline.Phase(phase).Open() {
		d.coordNote(ctx, *r, phase, fmt.Sprintf("continuing attempt %d after a coordinator stop", r.Pipeline.Attempts(phase)))
		return
	}
	startAttempt(r, phase, time.Now())
	d.recordStart(ctx, r, phase, source)
}

// recordStart records a phase attempt's start, as the run's status has it.
func (d *driverCtl) recordStart(ctx context.Context, r *store.Run, phase modes.PhaseName, source runstate.EventSource) {
	d.save(ctx, r)
	ps := r.Pipeline.Phase(phase)
	if err := d.cfg.Store.UpsertPhase(context.WithoutCancel(ctx), store.Phase{
		RunID: r.ID, Name: phase, Status: curev1.PhaseStatus_PHASE_RUNNING, Attempts: ps.Attempts, StartedAt: ps.StartedAt,
	}); err != nil {
		d.cfg.Log.Error("store phase", "err", err)
	}
	if phase == modes.Validate {
		d.bmc.validateChanged(r.ID, true)
	}
	if source == runstate.SourceCoordinator {
		d.coordEvent(context.WithoutCancel(ctx), *r, phase, runstate.EventPhaseStart, "", "", 0)
	}
}

// end ends a coordinator phase's attempt and records it.
func (d *driverCtl) end(ctx context.Context, r *store.Run, phase modes.PhaseName, out outcome, dur time.Duration, source runstate.EventSource) {
	ps := r.Pipeline.Phase(phase)
	ps.Ended = true
	r.Pipeline.SetPhase(phase, ps)
	endAttempt(r, phase, out)
	d.recordEnd(ctx, r, phase, out, dur, source)
}

// recordEnd records a phase attempt's result; the end of a validate phase
// has the run's results judged against its SKU's fleet.
func (d *driverCtl) recordEnd(ctx context.Context, r *store.Run, phase modes.PhaseName, out outcome, dur time.Duration, source runstate.EventSource) {
	ctx = context.WithoutCancel(ctx)
	now := time.Now().UTC()
	started := r.Pipeline.Phase(phase).StartedAt
	if started.IsZero() {
		started = now.Add(-dur)
	}
	if err := d.cfg.Store.UpsertPhase(ctx, store.Phase{
		RunID: r.ID, Name: phase, Status: out.status, Attempts: r.Pipeline.Attempts(phase),
		StartedAt: started, EndedAt: now, Message: out.msg,
	}); err != nil {
		d.cfg.Log.Error("store phase", "err", err)
	}
	if phase == modes.Validate {
		d.bmc.validateChanged(r.ID, false)
	}
	d.cfg.Metrics.PhaseEnded(phase, d.skuOf(ctx, r), runstate.PhaseName(out.status), dur)
	d.save(ctx, r)
	if source == runstate.SourceCoordinator {
		d.coordEvent(ctx, *r, phase, runstate.EventPhaseEnd, runstate.PhaseName(out.status), out.msg, dur)
	}
	d.cfg.Log.Info("phase end", "run", r.ID, "node", r.NodeID, "phase", phase, "status", runstate.PhaseName(out.status), "msg", out.msg, "duration", dur.Round(time.Millisecond))
	if phase == modes.Validate {
		if err := d.fleet.judgeFleet(ctx, r); err != nil {
			d.cfg.Log.Error("fleet bands", "run", r.ID, "err", err)
		}
	}
}

// endedBindingKeep is how long an ended run's runner can still be told its
// run ended: a runner cut off by a network outage when its run ended asks
// again when the network is back.
const endedBindingKeep = 24 * time.Hour

func (c *core) finish(ctx context.Context, r *store.Run, status curev1.RunStatus, msg string) {
	ctx = context.WithoutCancel(ctx)
	c.bmc.bmcEvidenceAtEnd(ctx, r)
	r.Status = status
	r.Message = msg
	r.EndedAt = time.Now().UTC()
	r.Pipeline.Boot = store.BootUnset
	r.Pipeline.HostTokens = nil
	// A finished run takes no session any more: its tokens go before the
	// run reads as ended (nobody who sees it ended finds a live token), and
	// its runner is cut off. The binding of the boot that registered stays
	// a while, opening nothing: that boot, proving itself with its session
	// secret, is told its run ended and stops dialling, instead of being
	// refused as a stranger (a security event) at each attempt.
	if err := c.cfg.Store.EndRunBootTokens(ctx, r.ID, r.EndedAt.Add(endedBindingKeep)); err != nil {
		c.cfg.Log.Error("delete boot tokens of finished run", "run", r.ID, "err", err)
	}
	c.save(ctx, r)
	c.cfg.Hub.CloseRun(r.ID)
	c.coordEvent(ctx, *r, r.Phase, runstate.EventRunEnd, runstate.RunName(status), msg, r.EndedAt.Sub(r.StartedAt))
	c.cfg.Log.Info("run end", "run", r.ID, "node", r.NodeID, "status", runstate.RunName(status), "msg", msg)
	c.cfg.Metrics.RunEnded(r.ID, r.Mode, runstate.RunName(status), r.Reboots)
	if c.cfg.Notify != nil {
		c.cfg.Notify(RunNotice{Run: *r, SKU: c.skuOf(ctx, r)})
	}
}
