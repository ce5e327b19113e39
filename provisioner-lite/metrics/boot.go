package metrics

import (
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// maxBootStages bounds what one Hello may list before it is ignored whole.
const maxBootStages = 32

// maxBootUptime bounds a stage's uptime: a CURE boot that took longer to
// register has bigger problems than its breakdown.
const maxBootUptime = time.Hour

// BootStep is one stage of a runner's boot: when it was reached (guest
// uptime) and how long after the previous stage it reports.
type BootStep struct {
	Stage  string
	Uptime time.Duration
	Took   time.Duration
}

// BootSteps checks a Hello's boot stages and returns them in boot order
// with the time each took. The list is the runner's word: only known stage
// names count (each once, the first), uptimes outside [0, 1h] and stages
// reported before the one preceding them are dropped, and an overlong list
// is ignored whole. Nothing is decided on it; it feeds a metric and a log.
func BootSteps(stages []*curev1.BootStage) []BootStep {
	if len(stages) > maxBootStages {
		return nil
	}
	at := map[string]time.Duration{}
	for _, s := range stages {
		d := time.Duration(s.GetUptimeMs()) * time.Millisecond
		if s.GetUptimeMs() < 0 || d > maxBootUptime {
			continue
		}
		if _, dup := at[s.GetName()]; !dup {
			at[s.GetName()] = d
		}
	}
	var out []BootStep
	var prev time.Duration
	for _, name := range curev1.BootStageNames {
		d, ok := at[name]
		if !ok || d < prev {
			continue
		}
		out = append(out, BootStep{Stage: name, Uptime: d, Took: d - prev})
		prev = d
	}
	return out
}

// FormatBootSteps is the log form: "init_started=2.66s(+0.64s) ...".
func FormatBootSteps(steps []BootStep) string {
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%s=%.2fs(+%.2fs)", s.Stage, s.Uptime.Seconds(), s.Took.Seconds()))
	}
	return strings.Join(parts, " ")
}

// BootStages observes each step's duration, and the whole boot (guest
// uptime at the last step) as stage="total".
func (m *Metrics) BootStages(steps []BootStep) {
	if m == nil || len(steps) == 0 {
		return
	}
	for _, s := range steps {
		m.bootStage.WithLabelValues(s.Stage).Observe(s.Took.Seconds())
	}
	m.bootStage.WithLabelValues("total").Observe(steps[len(steps)-1].Uptime.Seconds())
}
