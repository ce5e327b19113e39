package phases

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/gpucheck"
	"github.com/cure-oss/cure/tools/checks/suite"
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
// ends, with a progress log per check so `curectl watch` follows a burn-in.
// Disk writes are allowed only in burn-in, and only where the suite asks for
// a scratch area.
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
	env := suite.Env{Root: e.cfg.Root, Disks: e.cfg.Disks, AllowDiskWrites: mode == modes.Burnin,
		GPU: gpucheck.Checks{Root: e.cfg.Root, TmpDir: e.cfg.TmpDir, Log: e.cfg.Log, Prepare: e.gpuDriverUp(emit)}.Build}
	for _, c := range s.Spec.Checks {
		if manifests.CheckTools(c.Type) != "" {
			tb := &toolBundle{e: e, ref: a.GetToolBundle(), emit: emit}
			defer tb.done()
			env.Measure = tb.measure
			break
		}
	}
	if e.cfg.SuiteEnv != nil {
		env = e.cfg.SuiteEnv(env)
	}
	start := e.cfg.now()
	counts := map[checks.Status]int{}
	var bad []string
	vs, err := suite.Run(ctx, s, env, checks.Options{
		FailFast: s.Spec.FailFast,
		Log:      e.cfg.Log,
		OnVerdict: func(v checks.Verdict) {
			counts[v.Status]++
			if v.Status == checks.Fail || v.Status == checks.Error {
				bad = append(bad, fmt.Sprintf("%s %s", v.Component, v.Check))
			}
			emit.Verdict(&curev1.Verdict{Component: v.Component, Check: v.Check, Status: protoStatus(v.Status),
				Observed: v.Observed, Expected: v.Expected, Message: v.Message, Measurements: protoMeasurements(v.Measurements)})
			emit.Log("INFO", fmt.Sprintf("progress %s: %s %s %s (elapsed %s)", s.Metadata.Name, v.Component, v.Check, v.Status,
				e.cfg.now().Sub(start).Round(time.Second)), map[string]string{"check": v.Check})
		},
	})
	if err != nil {
		return failed("validate %s: %v", s.Metadata.Name, err)
	}
	summary := fmt.Sprintf("%s: %d verdicts, %d PASS, %d FAIL, %d ERROR, %d SKIP in %s", s.Metadata.Name, len(vs),
		counts[checks.Pass], counts[checks.Fail], counts[checks.Error], counts[checks.Skip], e.cfg.now().Sub(start).Round(time.Second))
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

func protoMeasurements(ms []checks.Measurement) []*curev1.Measurement {
	out := make([]*curev1.Measurement, 0, len(ms))
	for _, m := range ms {
		// The coordinator refuses a verdict with a non-finite number;
		// such a reading is in Observed as NaN already.
		if !math.IsNaN(m.Value) && !math.IsInf(m.Value, 0) {
			out = append(out, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
		}
	}
	return out
}

func nonEmptyName(n string) string {
	if n == "" {
		return "assignment suite"
	}
	return n
}
