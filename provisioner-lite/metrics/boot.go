package metrics

import (
	"cmp"
	"fmt"
	"slices"
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

// BootSteps checks a Hello's boot stages and returns them in the order they
// were reached (uptime; equal times in BootStageNames order) with the time
// each took since the one before. The list is the runner's word: only known
// stage names count (each once, the first), uptimes outside [0, 1h] are
// dropped, and an overlong list is ignored whole. Nothing is decided on it;
// it feeds a metric and a log.
func BootSteps(stages []*curev1.BootStage) []BootStep {
	if len(stages) > maxBootStages {
		return nil
	}
	known := map[string]int{}
	for i, n := range curev1.BootStageNames {
		known[n] = i
	}
	at := map[string]time.Duration{}
	for _, s := range stages {
		if _, ok := known[s.GetName()]; !ok {
			continue
		}
		// Bounds checked in milliseconds: converting first could overflow.
		if ms := s.GetUptimeMs(); ms < 0 || ms > maxBootUptime.Milliseconds() {
			continue
		}
		d := time.Duration(s.GetUptimeMs()) * time.Millisecond
		if _, dup := at[s.GetName()]; !dup {
			at[s.GetName()] = d
		}
	}
	out := make([]BootStep, 0, len(at))
	for name, d := range at {
		out = append(out, BootStep{Stage: name, Uptime: d})
	}
	slices.SortFunc(out, func(a, b BootStep) int {
		if c := cmp.Compare(a.Uptime, b.Uptime); c != 0 {
			return c
		}
		return cmp.Compare(known[a.Stage], known[b.Stage])
	})
	var prev time.Duration
	for i := range out {
		out[i].Took = out[i].Uptime - prev
		prev = out[i].Uptime
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
