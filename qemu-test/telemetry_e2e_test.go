package qemutest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/qemu-test/harness"
)

// sampledSuite loads the QEMU node's CPUs, memory and disk at once for
// 20 seconds with its telemetry sampled every 2 seconds and the BMC's
// sensors polled as often. Under QEMU the guest's kernel has one hwmon
// sensor (the emulated NVMe drive's composite temperature, with its crit
// and max) and no cpufreq or throttle counter: its CPU load (/proc/stat)
// and that sensor are what the host gives, and the bar on what it lacks
// is said, not passed.
const sampledSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: qemu-stage-sampled
  description: CPU, memory and disk loaded at once, host and BMC sampled (TestConcurrentStageSampled)
spec:
  grace: 3m
  stages:
    - name: load
      duration: 20s
      telemetry:
        interval: 2s
        bmcInterval: 2s
        thresholds:
          cpuThrottledShare: {max: 0.05}
          hwmonTempMaxC: {max: 95}
      checks:
        - name: cpu-load
          type: cpu
          appliesTo: "cpu/*"
          interval: 5s
          thresholds:
            computeErrors: {equals: 0}
        - name: memory-load
          type: memory
          appliesTo: memory
          params:
            fraction: 0.02
            patterns: [walking-ones, random]
          thresholds:
            mismatches: {max: 0}
        - name: disk-read
          type: storage-throughput
          appliesTo: "disk/*"
          interval: 2s
          params:
            length: 8MiB
          thresholds:
            readbackMismatches: {equals: 0}
`

// TestConcurrentStageSampled: a stage of several checks at once (CPU,
// memory, disk read) with telemetry; the run's report holds host samples
// and the virtual BMC's sensor samples taken during the load, their
// times inside the stage's start and end, the guest's CPUs busy in them;
// the stage's bars give verdicts naming the stage; the HTML report plots
// the host's series.
func TestConcurrentStageSampled(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{})
	n := env.Nodes[0]
	if err := os.WriteFile(filepath.Join(env.Opts.Work, "manifests", "suites", "qemu-stage-sampled.yaml"), []byte(sampledSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, n.ID, modes.Diagnostic, "qemu-stage-sampled", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var mu sync.Mutex
	var timeline []*curev1.TimelineEntry
	var stageStart, stageEnd int64
	running := 0 // most checks of the stage seen running at once
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		mu.Lock()
		defer mu.Unlock()
		if runstate.EventKind(e.GetKind()) == runstate.EventProgress {
			k := 0
			for _, c := range e.GetProgress().GetChecks() {
				if c.GetStage() == "load" && c.GetState() == "running" {
					k++
				}
			}
			running = max(running, k)
			return
		}
		t.Logf("%6.1fs %-11s %-9s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		timeline = append(timeline, e)
		if runstate.EventSource(e.GetSource()) == runstate.SourceRunner && runstate.EventKind(e.GetKind()) == runstate.EventLog {
			switch {
			case strings.HasPrefix(e.GetMessage(), "stage load started"):
				stageStart = e.GetTimeUnixMs()
			case strings.HasPrefix(e.GetMessage(), "stage load ended"):
				stageEnd = e.GetTimeUnixMs()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("diagnostic ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	if stageStart == 0 || stageEnd <= stageStart {
		t.Fatalf("stage load: start %d end %d (no start/end in the timeline)", stageStart, stageEnd)
	}
	t.Logf("stage load: %s, at most %d checks running at once", time.Duration(stageEnd-stageStart)*time.Millisecond, running)
	if running != 3 {
		t.Errorf("at most %d checks of the stage ran at once, want 3", running)
	}
	within := func(s *curev1.Series) (in int) {
		for _, tm := range s.GetTimeUnixMs() {
			if tm >= stageStart && tm <= stageEnd {
				in++
			}
		}
		return in
	}

	// The host: the guest's CPU package load, sampled during the stage.
	var busy *curev1.Series
	for _, s := range rep.GetHostSeries() {
		t.Logf("host series %s %s %s: %d points, %v", s.GetSource(), s.GetComponent(), s.GetMetric(), len(s.GetValues()), s.GetValues())
		if s.GetComponent() == "cpu/0" && s.GetMetric() == "busy_pct" {
			busy = s
		}
		if len(s.GetTimeUnixMs()) != within(s) {
			t.Errorf("%s %s: %d of %d points outside the stage %d–%d", s.GetComponent(), s.GetMetric(), len(s.GetTimeUnixMs())-within(s), len(s.GetTimeUnixMs()), stageStart, stageEnd)
		}
	}
	if busy == nil || within(busy) < 4 {
		t.Fatalf("CPU load series in the report: %v", busy)
	}
	if hi := maxOf(busy.GetValues()); hi < 50 {
		t.Errorf("the guest's CPUs were at most %.1f%% busy during a CPU load", hi)
	}

	// The virtual BMC's sensors, polled during the stage.
	bmcIn := 0
	for _, s := range rep.GetBmcSeries() {
		bmcIn += within(s)
		if s.GetComponent() == "bmc/Sensors/CPU1Temp" {
			t.Logf("BMC CPU1Temp: %v C", s.GetValues())
		}
	}
	if bmcIn < 2*len(rep.GetBmcSeries()) || len(rep.GetBmcSeries()) == 0 {
		t.Errorf("%d BMC series, %d points inside the stage", len(rep.GetBmcSeries()), bmcIn)
	}

	// The stage's bars: the NVMe sensor judged on its samples, what QEMU's
	// guest lacks said, not passed.
	bars := map[string]*curev1.Verdict{}
	for _, v := range rep.GetVerdicts() {
		if v.GetCheck() == "telemetry:load" {
			bars[v.GetComponent()] = v
			t.Logf("bar verdict %s: %s %s (observed %s) %v", v.GetComponent(), v.GetStatus(), v.GetMessage(), v.GetObserved(), v.GetMeasurements())
		} else if v.GetStatus() != curev1.VerdictStatus_PASS && v.GetCheck() != "hardware" {
			t.Errorf("%s %s: %s %s", v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetMessage())
		}
	}
	if v := bars["cpu"]; v == nil || v.GetStatus() != curev1.VerdictStatus_SKIP || v.GetStage() != "load" || !strings.Contains(v.GetMessage(), "cpuThrottledShare not judged") {
		t.Errorf("cpu telemetry verdict: %v", v)
	}
	hwmon := 0
	for comp, v := range bars {
		if !strings.HasPrefix(comp, "hwmon/") {
			continue
		}
		hwmon++
		ms := v.GetMeasurements()
		if v.GetStatus() != curev1.VerdictStatus_PASS || v.GetStage() != "load" || len(ms) != 1 || ms[0].GetMetric() != "hwmonTempMaxC" || ms[0].GetUnit() != "C" || ms[0].GetValue() <= 0 {
			t.Errorf("hwmon telemetry verdict %s: %v", comp, v)
		}
	}
	if hwmon == 0 {
		t.Error("no hwmon sensor judged (the guest's NVMe drive has one)")
	}

	// The HTML report plots the host's series.
	var page bytes.Buffer
	if err := render.WriteHTML(&page, rep, timeline); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `id="host-plots"`) || !strings.Contains(page.String(), "host busy_pct") {
		t.Error("the HTML report has no plot of the host's series")
	}
	if dir := os.Getenv("CURE_REPORT_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "stage-sampled-report.html"), page.Bytes(), 0o644)
	}
}

func maxOf(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}
