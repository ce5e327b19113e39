package phases

import (
	"context"
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/gpucheck"
	"github.com/cure-oss/cure/tools/checks/suite"
	"github.com/cure-oss/cure/tools/telemetry"
	"github.com/cure-oss/cure/tools/telemetry/bars"
)

// stageTelemetry samples the host while a stage that sets telemetry runs
// (started and stopped by the suite's stage hook) and judges the stage's
// bars on what it sampled.
type stageTelemetry struct {
	suite   *manifests.ValidationSuite
	emit    agent.Emitter
	sampler *telemetry.Sampler
	ctx     context.Context
	log     func(msg string, attrs map[string]string)
}

func (e *Executor) newStageTelemetry(ctx context.Context, s *manifests.ValidationSuite, emit agent.Emitter) *stageTelemetry {
	var gpu telemetry.GPUSource
	if e.cfg.TelemetryGPU != nil {
		gpu = e.cfg.TelemetryGPU
	} else {
		gpu = gpucheck.Telemetry{Root: e.cfg.Root, Log: e.cfg.Log, Prepare: e.gpuDriverUp(emit)}
	}
	t := &stageTelemetry{suite: s, emit: emit, ctx: ctx,
		log: func(msg string, attrs map[string]string) { emit.Log("INFO", msg, attrs) }}
	t.sampler = telemetry.New(telemetry.Options{Root: e.cfg.Root, GPU: gpu, Log: e.cfg.Log, Now: e.cfg.now,
		Send: func(batch []telemetry.Series) { emit.Samples(samplesProto(batch)) }})
	return t
}

func (t *stageTelemetry) spec(name string) *manifests.Stage {
	for i := range t.suite.Spec.Stages {
		if t.suite.Spec.Stages[i].Name == name {
			return &t.suite.Spec.Stages[i]
		}
	}
	return nil
}

// stage follows the suite's stage hook: sampling starts with a stage that
// sets telemetry and stops at its end, when its bars are judged. It
// returns the stage's telemetry verdicts (none at a start).
func (t *stageTelemetry) stage(ev checks.StageEvent) []bars.Verdict {
	st := t.spec(ev.Stage)
	if st == nil || st.Telemetry == nil {
		return nil
	}
	if !ev.End {
		planned := time.Duration(st.Duration)
		for _, c := range t.suite.Spec.Checks {
			if c.Stage == st.Name {
				planned = max(planned, suite.CheckDuration(&t.suite.Spec, c))
			}
		}
		interval := time.Duration(st.Telemetry.Interval)
		if err := t.sampler.Start(t.ctx, telemetry.Stage{Name: st.Name, Interval: interval, Planned: planned}); err != nil {
			t.log(fmt.Sprintf("stage %s: telemetry not sampled: %v", st.Name, err), map[string]string{"stage": st.Name})
		}
		return nil
	}
	res := t.sampler.Stop()
	if res.Stage != st.Name {
		return nil // never started
	}
	msg := fmt.Sprintf("stage %s telemetry: %d series, %d host samples over %s", st.Name, len(res.Series), res.Samples, res.End.Sub(res.Start).Round(time.Second))
	for src, p := range res.Problems {
		msg += fmt.Sprintf("; %s: %s", src, p)
	}
	if len(res.Notes) > 0 {
		msg += "; " + strings.Join(res.Notes, "; ")
	}
	t.log(msg, map[string]string{"stage": st.Name})
	return bars.Judge(res, st.Telemetry.Thresholds)
}

// stop ends a sampling the suite left running (it stopped mid-stage).
func (t *stageTelemetry) stop() { t.sampler.Stop() }

// barVerdict is a telemetry verdict on the wire: its measurements, when
// it first crossed its bar, its stage.
func barVerdict(v bars.Verdict) *curev1.Verdict {
	out := &curev1.Verdict{Component: v.Component, Check: v.Check, Status: protoStatus(v.Status), Observed: v.Observed,
		Expected: v.Expected, Message: v.Message, Stage: v.Stage}
	if !v.At.IsZero() {
		out.AtUnixMs = v.At.UnixMilli()
	}
	for _, m := range v.Measurements {
		out.Measurements = append(out.Measurements, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	return out
}

func samplesProto(batch []telemetry.Series) *curev1.Samples {
	out := &curev1.Samples{}
	for _, s := range batch {
		out.Series = append(out.Series, &curev1.Series{Component: s.Component, Metric: s.Metric, Unit: s.Unit, Source: s.Source,
			TimeUnixMs: s.Times, Values: s.Values})
	}
	return out
}
