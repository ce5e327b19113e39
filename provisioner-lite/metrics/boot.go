package metrics

import (
	curev1 "github.com/cure-oss/cure/api/curev1"
)

// BootStages observes each step's duration, and the whole boot (guest
// uptime at the last step) as stage="total".
func (m *Metrics) BootStages(steps []curev1.BootStep) {
	if m == nil || len(steps) == 0 {
		return
	}
	for _, s := range steps {
		m.bootStage.WithLabelValues(s.Stage).Observe(s.Took.Seconds())
	}
	m.bootStage.WithLabelValues("total").Observe(steps[len(steps)-1].Uptime.Seconds())
}
