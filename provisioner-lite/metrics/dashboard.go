package metrics

import "github.com/prometheus/client_golang/prometheus"

// dashboardMetrics are the web dashboard's live streams: how many are
// open, how many were refused at a cap, and the fleet snapshots they
// share (snapshots against updates shows the sharing: one snapshot per
// tick feeds every stream).
type dashboardMetrics struct {
	streams   prometheus.Gauge
	refused   *prometheus.CounterVec
	snapshots prometheus.Counter
	updates   prometheus.Counter
}

func newDashboardMetrics(reg *prometheus.Registry) *dashboardMetrics {
	d := &dashboardMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "dashboard_streams",
			Help: "Live dashboard streams open now."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "dashboard_streams_refused_total",
			Help: "Live dashboard streams refused, by cap (operator-streams, total-streams)."}, []string{"reason"}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "dashboard_snapshots_total",
			Help: "Fleet snapshots taken for the live dashboard streams (one per tick while any is open, shared by all)."}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "dashboard_stream_updates_total",
			Help: "Snapshots taken in by live dashboard streams (one per stream per snapshot)."}),
	}
	reg.MustRegister(d.streams, d.refused, d.snapshots, d.updates)
	return d
}

// DashboardStreams sets the live streams open now.
func (m *Metrics) DashboardStreams(open int) {
	if m == nil {
		return
	}
	m.dash.streams.Set(float64(open))
}

// DashboardStreamRefused counts a live stream refused at a cap.
func (m *Metrics) DashboardStreamRefused(reason string) {
	if m == nil {
		return
	}
	m.dash.refused.WithLabelValues(reason).Inc()
}

// DashboardSnapshot counts a fleet snapshot taken for the live streams.
func (m *Metrics) DashboardSnapshot() {
	if m == nil {
		return
	}
	m.dash.snapshots.Inc()
}

// DashboardStreamUpdate counts a stream taking a snapshot in.
func (m *Metrics) DashboardStreamUpdate() {
	if m == nil {
		return
	}
	m.dash.updates.Inc()
}
