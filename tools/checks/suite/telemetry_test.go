package suite

import (
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
)

// TestBuildTelemetryBars: a stage's telemetry bars are checked when the
// suite is built, each problem naming the stage and the key.
func TestBuildTelemetryBars(t *testing.T) {
	s, err := manifests.ParseSuite("bars.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: bars}
spec:
  stages:
    - name: warm
      telemetry:
        thresholds:
          cpuTempMaxC: {max: 90}
      checks:
        - {name: t1, type: thermal}
    - name: soak
      duration: 1m
      telemetry:
        interval: 1s
        thresholds:
          gpuTempMax: {max: 85}
          cpuThrottledShare: {max: 2}
          gpuClockShareOfBase: {min: 0.9}
      checks:
        - {name: t2, type: thermal}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(s, Env{Root: t.TempDir()})
	if err == nil {
		t.Fatal("a suite with unknown telemetry bars built")
	}
	for _, want := range []string{
		"spec.stages[1] (soak): telemetry.thresholds.gpuTempMax: unknown metric for stage telemetry (want one of cpuTempMaxC, gpuTempMaxC",
		"spec.stages[1] (soak): telemetry.thresholds.cpuThrottledShare: 2 is outside [0, 1]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "stages[0]") || strings.Contains(err.Error(), "thresholds.gpuClockShareOfBase") {
		t.Errorf("valid bars reported:\n%v", err)
	}
}
