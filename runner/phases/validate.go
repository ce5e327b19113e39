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
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		return failed("validate: %v", err)
	}
	if mode != modes.Diagnostic && mode != modes.Burnin {
		return failed("validate: mode %s runs no validation suite", mode)
	}
	doc, err := manifests.Parse(nonEmptyName(a.GetManifestName()), a.GetManifestYaml())
	if err != nil {
		return failed("validate: %v", err)
	}
	if doc.Suite == nil {
		return failed("validate: %s is a %s, not a ValidationSuite", a.GetManifestName(), doc.Kind)
	}
	s := doc.Suite
	// The SKU's GPU topology (NVLinks per GPU, NVSwitches, fabric) is what
	// the GPU checks hold the node to where the suite does not say.
	var topo *gpucheck.Topology
	var sku *manifests.SKU
	if raw := a.GetSkuYaml(); len(raw) > 0 {
		var err error
		sku, err = manifests.ParseSKU(nonEmptyName(a.GetSkuName()), raw)
		if err != nil {
			return failed("validate: %v", err)
		}
		topo = gpucheck.TopologyOf(sku.Spec.Hardware)
	}
	env := suite.Env{Root: e.cfg.Root, Disks: e.cfg.Disks, AllowDiskWrites: mode == modes.Burnin,
		GPU: gpucheck.Checks{Root: e.cfg.Root, TmpDir: e.cfg.TmpDir, Log: e.cfg.Log, Prepare: e.gpuDriverUp(emit), Topology: topo}.Build}
	var tb *toolBundle
	for _, c := range s.Spec.Checks {
		if manifests.CheckTools(c.Type) != "" {
			tb = &toolBundle{e: e, ref: a.GetToolBundle(), emit: emit}
			defer tb.done()
			env.Measure = tb.measure
			break
		}
	}
	for _, c := range s.Spec.Checks {
		if c.Type == manifests.CheckNodePair {
			pr := &pairRunner{e: e, emit: emit, inbox: e.cfg.Pairs, measure: env.Measure}
			if tb != nil && tb.ref != nil {
				pr.prepare = tb.fetch
			}
			if sku != nil && sku.Spec.Hardware != nil {
				pr.nics = sku.Spec.Hardware.NICs
			}
			env.Pair = pr.run
			break
		}
	}
	for _, c := range s.Spec.Checks {
		if c.Type == manifests.CheckSite {
			env.Site = e.siteChecks(a.GetArtifactBaseUrl(), emit)
			break
		}
	}
	if e.cfg.SuiteEnv != nil {
		env = e.cfg.SuiteEnv(env)
	}
	resume := a.GetSuiteResume()
	done := resume.GetDone()
	prog := newSuiteProgress(s, done, resume.GetResumed(), e.cfg.now)
	if resume != nil {
		var names []string
		for _, d := range done {
			names = append(names, d.GetCheck())
		}
		emit.Log("INFO", fmt.Sprintf("suite %s resumed after %d node reset(s) (policy %s): %d check(s) that had ended are kept and not run again: %s",
			s.Metadata.Name, resume.GetResumed(), nonEmpty(resume.GetPolicy(), manifests.ResumeContinue), len(done), nonEmpty(strings.Join(names, ", "), "none")), nil)
	}
	start := e.cfg.now()
	prog.beat(emit)
	hbCtx, stopBeats := context.WithCancel(ctx)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		t := time.NewTicker(heartbeatPeriod(a.GetHeartbeatMs()))
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
	counts := map[checks.Status]int{}
	var bad []string
	// Stages that set telemetry are sampled while they run and judged on
	// their bars when they end; those verdicts count with the checks'.
	tel := e.newStageTelemetry(ctx, s, emit)
	defer tel.stop()
	telVerdicts := 0
	poll := e.pollMachineChecks(emit)
	withLog := e.kernelLogFor(ctx, emit)
	onVerdict := func(v checks.Verdict) {
		v = withLog(v)
		counts[v.Status]++
		if v.Status == checks.Fail || v.Status == checks.Error {
			bad = append(bad, fmt.Sprintf("%s %s", v.Component, v.Check))
		}
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
		// Where a stage starts and ends: telemetry sampling hooks in here.
		OnStage: func(ev checks.StageEvent) {
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
				telVerdicts++
				counts[v.Status]++
				if v.Status == checks.Fail || v.Status == checks.Error {
					bad = append(bad, fmt.Sprintf("%s %s", v.Component, v.Check))
				}
				emit.Verdict(barVerdict(v))
			}
			prog.beat(emit)
		},
	})
	stopBeats()
	<-beats
	if err != nil {
		return failed("validate %s: %v", s.Metadata.Name, err)
	}
	// The boot's machine checks and EDAC counters, whatever the suite ran.
	for _, v := range e.hostErrorVerdicts(ctx, poll) {
		onVerdict(v)
		vs = append(vs, v)
	}
	prog.beat(emit)
	summary := fmt.Sprintf("%s: %d verdicts, %d PASS, %d FAIL, %d ERROR, %d SKIP in %s", s.Metadata.Name, len(vs)+telVerdicts,
		counts[checks.Pass], counts[checks.Fail], counts[checks.Error], counts[checks.Skip], e.cfg.now().Sub(start).Round(time.Second))
	if len(done) > 0 {
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
