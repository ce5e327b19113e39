package metrics

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestBootStagesMetric(t *testing.T) {
	m := New(Options{})
	m.BootStages(curev1.BootSteps([]*curev1.BootStage{
		{Name: "init_started", UptimeMs: 2000}, {Name: "modules_loaded", UptimeMs: 3500}, {Name: "hello_sent", UptimeMs: 4000},
	}))
	text := scrape(t, m)
	for _, want := range []string{
		`cure_boot_stage_seconds_sum{stage="modules_loaded"} 1.5`,
		`cure_boot_stage_seconds_sum{stage="total"} 4`,
		`cure_boot_stage_seconds_count{stage="hello_sent"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
