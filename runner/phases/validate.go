package phases

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/gpucheck"
	"github.com/cure-oss/cure/tools/checks/suite"
	"github.com/cure-oss/cure/tools/telemetry/bars"
)

// protoStatus maps a check verdict to the wire enum.
func protoStatus(s checks.Status) curev1.VerdictStatus {
	if v, ok := curev1.VerdictStatus_value[string(s)]; ok {
		return curev1.VerdictStatus(v)
	}
	return curev1.VerdictStatus_ERROR
}

// runValidate runs the assignment's validation suite (diagnostic and
// burn-in): one verdict per sub-component and check, streamed as each check
// ends; stages run their checks at once. Heartbeats (Progress) go out on
// every check state change and at least every heartbeat period, so the
// coordinator knows the runner alive through a soak of hours and `curectl
// watch` shows each check's progress. A suite resumed after a node reset
// does not run again the checks that had ended (Assignment.suite_resume).
// Disk writes are allowed only in burn-in, and only where the suite asks
// for a scratch area.
func (e *Executor) runValidate(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	s, mode, sku, err := validateInputs(a)
	if err != nil {
		return failed("validate: %v", err)
	}
	env, release := e.suiteEnv(a, emit, s, sku, mode)
	defer release()
	resume := a.GetSuiteResume()
	done := resume.GetDone()
	prog := newSuiteProgress(s, done, resume.GetResumed(), e.cfg.now)
	if resume != nil {
		logResume(emit, s, resume)
	}
	start := e.cfg.now()
	prog.beat(emit)
	stopBeats := beatEvery(ctx, agent.HeartbeatPeriod(a.GetHeartbeatMs()), prog, emit)
	t := &validateTally{counts: map[checks.Status]int{}}
	// Stages that set telemetry are sampled while they run and judged on
	// their bars when they end; those verdicts count with the checks'.
	tel := e.newStageTelemetry(ctx, s, emit)
	defer tel.stop()
	poll := e.pollMachineChecks(emit)
	withLog := e.kernelLogFor(ctx, emit)
	onVerdict := func(v checks.Verdict) {
		v = withLog(v)
		t.add(v.Status, v.Component, v.Check)
		emit.Verdict(&curev1.Verdict{Component: v.Component, Check: v.Check, Status: protoStatus(v.Status),
			Observed: v.Observed, Expected: v.Expected, Message: v.Message, Measurements: protoMeasurements(v.Measurements)})
		emit.Log("INFO", fmt.Sprintf("progress %s: %s %s %s (elapsed %s)", s.Metadata.Name, v.Component, v.Check, v.Status,
			e.cfg.now().Sub(start).Round(time.Second)), map[string]string{"check": v.Check})
	}
	vs, err := suite.Run(ctx, s, env, checks.Options{
		FailFast:  s.Spec.FailFast,
		Log:       e.cfg.Log,
		Done:      doneBefore(done),
		OnVerdict: onVerdict,
		OnCheck: func(name string, st checks.CheckState, worst checks.Status) {
			prog.check(name, st, worst)
			if st == checks.CheckRunning {
				emit.Log("INFO", fmt.Sprintf("check %s started", name), map[string]string{"check": name})
			}
			prog.beat(emit)
		},
		OnStage: onStage(emit, prog, tel, t),
	})
	stopBeats()
	if err != nil {
		return failed("validate %s: %v", s.Metadata.Name, err)
	}
	// The boot's machine checks and EDAC counters, whatever the suite ran.
	for _, v := range e.hostErrorVerdicts(ctx, poll) {
		onVerdict(v)
		vs = append(vs, v)
	}
	prog.beat(emit)
	return e.validateOutcome(s.Metadata.Name, len(vs), t, resume, e.cfg.now().Sub(start))
}

// validateInputs reads the assignment's suite, its mode (diagnostic or
// burn-in) and its SKU (nil when it carries none).
func validateInputs(a *curev1.Assignment) (*manifests.ValidationSuite, modes.Mode, *manifests.SKU, error) {
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		return nil, mode, nil, err
	}
	if mode != modes.Diagnostic && mode != modes.Burnin {
		return nil, mode, nil, fmt.Errorf("mode %s runs no validation suite", mode)
	}
	doc, err := manifests.Parse(nonEmptyName(a.GetManifestName()), a.GetManifestYaml())
	if err != nil {
		return nil, mode, nil, err
	}
	if doc.Suite == nil {
		return nil, mode, nil, fmt.Errorf("%s is a %s, not a ValidationSuite", a.GetManifestName(), doc.Kind)
	}
	var sku *manifests.SKU
	if raw := a.GetSkuYaml(); len(raw) > 0 {
		if sku, err = manifests.ParseSKU(nonEmptyName(a.GetSkuName()), raw); err != nil {
			return nil, mode, nil, err
		}
	}
	return doc.Suite, mode, sku, nil
}

// suiteEnv is what the suite's checks run with on this node: the GPU
// helper, the tool bundle, the coordinator for node-pair checks and the
// artifact server for site programs, each only where a check needs it.
// release ends the tool bundle's use.
func (e *Executor) suiteEnv(a *curev1.Assignment, emit agent.Emitter, s *manifests.ValidationSuite, sku *manifests.SKU, mode modes.Mode) (env suite.Env, release func()) {
	// The SKU's GPU topology (NVLinks per GPU, NVSwitches, fabric) is what
	// the GPU checks hold the node to where the suite does not say.
	var topo *gpucheck.Topology
	if sku != nil {
		topo = gpucheck.TopologyOf(sku.Spec.Hardware)
	}
	env = suite.Env{Root: e.cfg.Root, Disks: e.cfg.Disks, AllowDiskWrites: mode == modes.Burnin,
		GPU: gpucheck.Checks{Root: e.cfg.Root, TmpDir: e.cfg.TmpDir, Log: e.cfg.Log, Prepare: e.gpuDriverUp(emit), Topology: topo}.Build}
	release = func() {}
	var tb *toolBundle
	if slices.ContainsFunc(s.Spec.Checks, func(c manifests.Check) bool { return manifests.CheckTools(c.Type) != "" }) {
		tb = &toolBundle{e: e, ref: a.GetToolBundle(), emit: emit}
		release = tb.done
		env.Measure = tb.measure
	}
	if hasCheck(s, manifests.CheckNodePair) {
		pr := &pairRunner{e: e, emit: emit, inbox: e.cfg.Pairs, measure: env.Measure}
		if tb != nil && tb.ref != nil {
			pr.prepare = tb.fetch
		}
		if sku != nil && sku.Spec.Hardware != nil {
			pr.nics = sku.Spec.Hardware.NICs
		}
		env.Pair = pr.run
	}
	if hasCheck(s, manifests.CheckSite) {
		env.Site = e.siteChecks(a.GetArtifactBaseUrl(), emit)
	}
	if e.cfg.SuiteEnv != nil {
		env = e.cfg.SuiteEnv(env)
	}
	return env, release
}

func hasCheck(s *manifests.ValidationSuite, typ string) bool {
	return slices.ContainsFunc(s.Spec.Checks, func(c manifests.Check) bool { return c.Type == typ })
}

// logResume says which checks a resumed suite keeps from before the reset.
func logResume(emit agent.Emitter, s *manifests.ValidationSuite, resume *curev1.SuiteResume) {
	var names []string
	for _, d := range resume.GetDone() {
		names = append(names, d.GetCheck())
	}
	emit.Log("INFO", fmt.Sprintf("suite %s resumed after %d node reset(s) (policy %s): %d check(s) that had ended are kept and not run again: %s",
		s.Metadata.Name, resume.GetResumed(), nonEmpty(resume.GetPolicy(), manifests.ResumeContinue), len(resume.GetDone()), nonEmpty(strings.Join(names, ", "), "none")), nil)
}

// beatEvery sends the suite's progress every period until stop, which
// returns once the last beat is out.
func beatEvery(ctx context.Context, period time.Duration, prog *suiteProgress, emit agent.Emitter) (stop func()) {
	hbCtx, cancel := context.WithCancel(ctx)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				prog.beat(emit)
			}
		}
	}()
	return func() {
		cancel()
		<-beats
	}
}

// validateTally counts a suite's verdicts by status and names the failing
// ones; telemetry verdicts are the stages' bars.
type validateTally struct {
	counts      map[checks.Status]int
	bad         []string
	telVerdicts int
}

func (t *validateTally) add(st checks.Status, component, check string) {
	t.counts[st]++
	if st == checks.Fail || st == checks.Error {
		t.bad = append(t.bad, fmt.Sprintf("%s %s", component, check))
	}
}

// onStage logs where a stage starts and ends, and hooks telemetry
// sampling in there: a stage's bars are judged when it ends.
func onStage(emit agent.Emitter, prog *suiteProgress, tel *stageTelemetry, t *validateTally) func(checks.StageEvent) {
	return func(ev checks.StageEvent) {
		prog.stageEvent(ev)
		what := "started"
		var judged []bars.Verdict
		if ev.End {
			what = "ended"
			// Sampling stops before the end is logged, so every sample
			// lies between the stage's start and end lines.
			judged = tel.stage(ev)
		}
		emit.Log("INFO", fmt.Sprintf("stage %s %s: %s", ev.Stage, what, strings.Join(ev.Checks, ", ")), map[string]string{"stage": ev.Stage})
		if !ev.End {
			tel.stage(ev)
		}
		// The stage's checks have all ended here: nothing else reports.
		for _, v := range judged {
			t.telVerdicts++
			t.add(v.Status, v.Component, v.Check)
			emit.Verdict(barVerdict(v))
		}
		prog.beat(emit)
	}
}

// validateOutcome is the phase's summary: the counts, the checks kept
// from before a reset, the hardware's mismatches with the SKU; it fails
// when any verdict (kept ones included) failed or the hardware differs.
func (e *Executor) validateOutcome(name string, verdicts int, t *validateTally, resume *curev1.SuiteResume, took time.Duration) agent.PhaseOutcome {
	bad := t.bad
	summary := fmt.Sprintf("%s: %d verdicts, %d PASS, %d FAIL, %d ERROR, %d SKIP in %s", name, verdicts+t.telVerdicts,
		t.counts[checks.Pass], t.counts[checks.Fail], t.counts[checks.Error], t.counts[checks.Skip], took.Round(time.Second))
	if done := resume.GetDone(); len(done) > 0 {
		summary += fmt.Sprintf("; %d check(s) kept from before %d node reset(s)", len(done), resume.GetResumed())
		before := doneBefore(done)
		for _, d := range done {
			if st := before[d.GetCheck()]; st == checks.Fail || st == checks.Error {
				bad = append(bad, fmt.Sprintf("%s (%s before the reset)", d.GetCheck(), st))
			}
		}
	}
	if hw := e.hardwareFailures(); len(hw) > 0 {
		summary += "; hardware does not match the SKU: " + summarize(hw)
		if len(bad) == 0 {
			return failed("%s", summary)
		}
	}
	if len(bad) > 0 {
		return failed("%s; failing: %s", summary, strings.Join(bad, ", "))
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: summary}
}

// protoMeasurements puts a verdict's measured numbers on the wire: the
// coordinator keeps them as the fleet history its bands judge against.
func protoMeasurements(ms []checks.Measurement) []*curev1.Measurement {
	var out []*curev1.Measurement
	for _, m := range ms {
		out = append(out, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	return out
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func nonEmptyName(n string) string {
	if n == "" {
		return "assignment suite"
	}
	return n
}
