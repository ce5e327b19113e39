// Package metrics is the coordinator's Prometheus instrumentation: the
// metric families (one place, with their labels and meaning), the node
// metrics runners stream (bounded per node and in total, dropped when their
// run ends) and the /metrics, /healthz and /readyz handlers.
//
// Every method is safe on a nil *Metrics, so packages instrument
// unconditionally and tests that do not care pass nothing.
//
// Label values are bounded by construction: modes, phases, statuses, causes
// and operations are this code's constants; SKUs are the operator's manifest
// names; BMC vendors are folded into a fixed list (Vendor); node and run
// labels exist only on the node metrics, whose series are capped.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric.
const Namespace = "cure"

// Retry causes (cure_retries_total{cause}).
const (
	CausePhaseFailed  = "phase_failed"  // the phase reported failure (runner or coordinator)
	CausePhaseTimeout = "phase_timeout" // an in-band phase sent no phase_end in time
	CauseBMC          = "bmc_error"     // a coordinator phase's Redfish step failed
	CauseCUREBoot     = "cure_timeout"  // the runner did not register after PXE
	CauseHostOS       = "host_os_timeout"
	CauseRunnerLost   = "runner_lost" // the runner vanished past the reconnect budget: node rebooted into CURE
)

// Options tune the node metrics; zero fields take the defaults.
type Options struct {
	// NodeSeriesPerRun caps the series one run's runner may create (default 32:
	// 8 GPUs × temperature, SM and memory clock, plus install throughput).
	NodeSeriesPerRun int
	// NodeSeriesMax caps node series over all runs (default 100,000: 5,000
	// nodes in burn-in at 20 series each).
	NodeSeriesMax int
	// NodeSeriesTTL drops a series not updated for this long (default 10 min):
	// a runner that went away without its run ending (node lost, coordinator
	// restart) leaves nothing behind for long.
	NodeSeriesTTL time.Duration
	// NodeSeriesLinger keeps a finished run's series this long (default 1
	// min) so the final sample is scraped at least once.
	NodeSeriesLinger time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.NodeSeriesPerRun <= 0 {
		o.NodeSeriesPerRun = 32
	}
	if o.NodeSeriesMax <= 0 {
		o.NodeSeriesMax = 100_000
	}
	if o.NodeSeriesTTL <= 0 {
		o.NodeSeriesTTL = 10 * time.Minute
	}
	if o.NodeSeriesLinger <= 0 {
		o.NodeSeriesLinger = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Metrics holds the coordinator's metric families.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted   *prometheus.CounterVec
	runsEnded     *prometheus.CounterVec
	runsActive    *prometheus.GaugeVec
	phaseDuration *prometheus.HistogramVec
	runReboots    *prometheus.HistogramVec
	retries       *prometheus.CounterVec

	redfishDuration *prometheus.HistogramVec
	redfishErrors   *prometheus.CounterVec
	redfishRetries  *prometheus.CounterVec

	runnersConnected prometheus.Gauge
	runnerSessions   *prometheus.CounterVec
	eventLag         *prometheus.HistogramVec
	artifactBytes    *prometheus.CounterVec
	commitDuration   prometheus.Histogram
	commitOps        prometheus.Histogram
	webhooks         *prometheus.CounterVec
	bootStage        *prometheus.HistogramVec

	nodes *nodeMetrics
	dash  *dashboardMetrics
	pool  *poolMetrics
	inst  *instanceMetrics
}

// New registers every family in a fresh registry (plus Go runtime and
// process collectors).
func New(o Options) *Metrics {
	o.defaults()
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "runs_started_total",
		Help: "Runs this instance started driving (created, resumed or taken over), by mode."}, []string{"mode"})
	m.runsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "runs_ended_total",
		Help: "Runs this instance ended, by mode and final status (succeeded, failed, attention, canceled)."}, []string{"mode", "status"})
	m.runsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "runs_active",
		Help: "Runs this instance drives now, by mode."}, []string{"mode"})
	m.phaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "phase_duration_seconds",
		Help:    "Duration of each phase attempt, by phase, node SKU and outcome (ok, skipped, failed).",
		Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400}},
		[]string{"phase", "sku", "status"})
	m.runReboots = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "run_reboots",
		Help: "Reboots of a node per run (observed when the run ends), by mode.", Buckets: []float64{0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20}},
		[]string{"mode"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "retries_total",
		Help: "Phase retries and node recoveries, by phase and cause (phase_failed, phase_timeout, bmc_error, cure_timeout, host_os_timeout, runner_lost)."},
		[]string{"phase", "cause"})
	m.redfishDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "redfish_call_duration_seconds",
		Help:    "Duration of the pipeline's Redfish operations, by BMC vendor and operation (task and reset waits included as operations).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}},
		[]string{"vendor", "operation"})
	m.redfishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "redfish_errors_total",
		Help: "Redfish operations that failed, by BMC vendor and operation."}, []string{"vendor", "operation"})
	m.redfishRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "redfish_http_retries_total",
		Help: "HTTP requests to BMCs retried by the transport (503 load shedding, 502/504 on reads), by status code."}, []string{"code"})
	m.runnersConnected = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "runners_connected",
		Help: "Runner sessions connected to this instance now."})
	m.runnerSessions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "runner_sessions_total",
		Help: "Runner session attempts, by result (accepted, refused)."}, []string{"result"})
	m.eventLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "event_lag_seconds",
		Help:    "Runner event timestamp to stored, by event kind (clock skew between node and coordinator included; negative lags count as 0).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"kind"})
	m.artifactBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "artifact_bytes_served_total",
		Help: "Bytes the boot server sent, by kind (kernel, initrd, artifact)."}, []string{"kind"})
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "store_commit_duration_seconds",
		Help: "Store group-commit transactions, BEGIN to COMMIT done.", Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}})
	m.commitOps = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "store_commit_writes",
		Help: "Writes per store commit (group commit batch size).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}})
	m.bootStage = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "boot_stage_seconds",
		Help:    "Time a CURE boot spent reaching each stage from the previous one the runner reported; stage=\"total\" is the guest uptime at the last (registration).",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"stage"})
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "webhook_deliveries_total",
		Help: "Webhook delivery attempts, by result (delivered, retried, failed, dropped)."}, []string{"result"})
	m.nodes = newNodeMetrics(o)
	m.dash = newDashboardMetrics(reg)
	m.pool = newPoolMetrics(reg)
	m.inst = newInstanceMetrics(reg)
	for _, c := range []prometheus.Collector{m.runsStarted, m.runsEnded, m.runsActive, m.phaseDuration, m.runReboots, m.retries,
		m.redfishDuration, m.redfishErrors, m.redfishRetries, m.runnersConnected, m.runnerSessions, m.eventLag, m.artifactBytes,
		m.commitDuration, m.commitOps, m.webhooks, m.bootStage, m.nodes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

// Registry is the registry the handler serves (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the metrics in the Prometheus text (or protobuf) format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4, Timeout: 30 * time.Second})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// RunStarted counts a run this instance starts driving and adds it to the
// active gauge; RunStopped takes it out (the run ended, or the instance
// stops driving it).
func (m *Metrics) RunStarted(mode modes.Mode) {
	if m == nil {
		return
	}
	m.runsStarted.WithLabelValues(orNone(string(mode))).Inc()
	m.runsActive.WithLabelValues(orNone(string(mode))).Inc()
}

// RunStopped is the end of this instance's driving of a run.
func (m *Metrics) RunStopped(mode modes.Mode) {
	if m == nil {
		return
	}
	m.runsActive.WithLabelValues(orNone(string(mode))).Dec()
}

// RunEnded records a run's final status and reboots, and schedules its node
// series for removal.
func (m *Metrics) RunEnded(runID string, mode modes.Mode, status string, reboots int) {
	if m == nil {
		return
	}
	m.runsEnded.WithLabelValues(orNone(string(mode)), orNone(status)).Inc()
	m.runReboots.WithLabelValues(orNone(string(mode))).Observe(float64(reboots))
	m.nodes.runEnded(runID)
}

// PhaseEnded records one phase attempt.
func (m *Metrics) PhaseEnded(phase modes.PhaseName, sku, status string, d time.Duration) {
	if m == nil {
		return
	}
	m.phaseDuration.WithLabelValues(orNone(string(phase)), orNone(sku), orNone(status)).Observe(max(d, 0).Seconds())
}

// Retry counts one retry of phase for cause (the Cause constants).
func (m *Metrics) Retry(phase modes.PhaseName, cause string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(orNone(string(phase)), orNone(cause)).Inc()
}

// RedfishCall records one Redfish operation. Errors caused by the caller
// giving up (context canceled) are not the BMC's and are not counted.
func (m *Metrics) RedfishCall(vendor, operation string, d time.Duration, err error) {
	if m == nil {
		return
	}
	v := Vendor(vendor)
	m.redfishDuration.WithLabelValues(v, operation).Observe(d.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		m.redfishErrors.WithLabelValues(v, operation).Inc()
	}
}

// RedfishHTTPRetry counts one transport-level retry of a BMC request.
func (m *Metrics) RedfishHTTPRetry(code int) {
	if m == nil {
		return
	}
	m.redfishRetries.WithLabelValues(httpCode(code)).Inc()
}

// RunnerConnected moves the connected-runners gauge by delta (+1, -1).
func (m *Metrics) RunnerConnected(delta int) {
	if m == nil {
		return
	}
	m.runnersConnected.Add(float64(delta))
}

// RunnerSession counts a session attempt by result ("accepted", "refused").
func (m *Metrics) RunnerSession(result string) {
	if m == nil {
		return
	}
	m.runnerSessions.WithLabelValues(result).Inc()
}

// EventStored records the lag from the runner's timestamp to the store.
func (m *Metrics) EventStored(kind runstate.EventKind, lag time.Duration) {
	if m == nil {
		return
	}
	m.eventLag.WithLabelValues(eventKind(kind)).Observe(max(lag, 0).Seconds())
}

// ArtifactServed counts bytes the boot server sent for a route kind.
func (m *Metrics) ArtifactServed(kind string, bytes int64) {
	if m == nil || bytes <= 0 {
		return
	}
	m.artifactBytes.WithLabelValues(kind).Add(float64(bytes))
}

// StoreCommit records one group commit.
func (m *Metrics) StoreCommit(d time.Duration, writes int) {
	if m == nil {
		return
	}
	m.commitDuration.Observe(d.Seconds())
	m.commitOps.Observe(float64(writes))
}

// Webhook counts a webhook delivery attempt by result.
func (m *Metrics) Webhook(result string) {
	if m == nil {
		return
	}
	m.webhooks.WithLabelValues(result).Inc()
}

// NodeMetric records a sample a runner streamed for its run.
func (m *Metrics) NodeMetric(node, run, name, unit string, labels map[string]string, value float64) {
	if m == nil {
		return
	}
	m.nodes.record(node, run, name, unit, labels, value)
}

// NodeSeries is how many node series are held now (tests, stats).
func (m *Metrics) NodeSeries() int {
	if m == nil {
		return 0
	}
	return m.nodes.count()
}

// eventKind is the label of a runner event's kind: the five a runner
// sends, "other" for the coordinator's own.
func eventKind(k runstate.EventKind) string {
	switch k {
	case runstate.EventPhaseStart, runstate.EventPhaseEnd, runstate.EventVerdict, runstate.EventLog, runstate.EventMetric:
		return string(k)
	case runstate.EventInfo, runstate.EventRunEnd, runstate.EventHostReady, runstate.EventProgress:
	}
	return "other"
}

func httpCode(c int) string {
	switch c {
	case 502, 503, 504:
		return []string{"502", "503", "504"}[c-502]
	}
	return "other"
}
