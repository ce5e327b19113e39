package phases

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/telemetry"
)

const telemetrySuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: sampled
spec:
  stages:
    - name: quick
      checks:
        - {name: sensors-before, type: thermal}
    - name: load
      duration: 300ms
      telemetry:
        interval: 20ms
        thresholds:
          hwmonTempMaxC: {max: 80}
          gpuTempMaxC: {max: 85}
          cpuThrottledShare: {max: 0}
      checks:
        - {name: sensors, type: thermal, interval: 50ms}
`

type gpuReadings struct{ temps []float64 }

func (g gpuReadings) Sample(ctx context.Context, every time.Duration, out func([]telemetry.GPUReading)) error {
	for _, c := range g.temps {
		out([]telemetry.GPUReading{{Index: 0, Time: time.Now(), TempC: c, SMMHz: 1980, BaseMHz: 1980, PowerW: 600}})
	}
	<-ctx.Done()
	return nil
}

// TestValidateStageTelemetry: a stage with telemetry is sampled while its
// checks run, the samples go out as Samples events, and its bars give
// verdicts with their stage, measurements and (failing) the time.
func TestValidateStageTelemetry(t *testing.T) {
	root := t.TempDir()
	for f, v := range map[string]string{
		"sys/class/hwmon/hwmon0/name": "nvme", "sys/class/hwmon/hwmon0/temp1_label": "Composite", "sys/class/hwmon/hwmon0/temp1_input": "95000",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0",
		"proc/stat": "cpu0 10 0 0 90 0 0 0 0",
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := New(Config{Log: quiet(), Root: root, TelemetryGPU: gpuReadings{temps: []float64{70, 91, 75}}})
	em := &recEmitter{}
	start := time.Now()
	out := e.Run(context.Background(), "validate", &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_BURNIN,
		ManifestYaml: []byte(telemetrySuite), ManifestName: "sampled.yaml"}, em)
	end := time.Now()
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "hwmon/nvme/Composite telemetry:load") ||
		!strings.Contains(out.Message, "gpu/0 telemetry:load") {
		t.Fatalf("outcome %+v", out)
	}
	byComp := map[string]*curev1.Verdict{}
	for _, v := range em.verdicts {
		if strings.HasPrefix(v.GetCheck(), "telemetry:") {
			byComp[v.GetComponent()] = v
		}
	}
	nv := byComp["hwmon/nvme/Composite"]
	if nv == nil || nv.GetStatus() != curev1.VerdictStatus_FAIL || nv.GetStage() != "load" || nv.GetAtUnixMs() < start.UnixMilli() ||
		nv.GetAtUnixMs() > end.UnixMilli() || len(nv.GetMeasurements()) != 1 || nv.GetMeasurements()[0].GetValue() != 95 ||
		nv.GetMeasurements()[0].GetUnit() != "C" || !strings.Contains(nv.GetMessage(), "into stage load") {
		t.Errorf("hwmon verdict %v", nv)
	}
	if g := byComp["gpu/0"]; g == nil || g.GetStatus() != curev1.VerdictStatus_FAIL || g.GetMeasurements()[0].GetValue() != 91 {
		t.Errorf("gpu verdict %v", g)
	}
	// A VM without throttle counters has nothing for cpuThrottledShare.
	if c := byComp["cpu"]; c == nil || c.GetStatus() != curev1.VerdictStatus_SKIP || !strings.Contains(c.GetMessage(), "no thermal_throttle") {
		t.Errorf("cpu verdict %v", c)
	}
	// Samples went out, from the host and the GPU, inside the stage.
	sources := map[string]int{}
	for _, b := range em.samples {
		for _, s := range b.GetSeries() {
			sources[s.GetSource()] += len(s.GetTimeUnixMs())
			for _, tm := range s.GetTimeUnixMs() {
				if tm < start.UnixMilli() || tm > end.UnixMilli() {
					t.Errorf("%s %s sampled at %d, outside the run %d–%d", s.GetComponent(), s.GetMetric(), tm, start.UnixMilli(), end.UnixMilli())
				}
			}
		}
	}
	if sources["host"] < 2 || sources["gpu"] < 3 {
		t.Errorf("samples sent per source %v", sources)
	}
}
