package metrics

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Node metrics: what a runner measures on its node (GPU temperatures and
// clocks during burn-in, install throughput) arrives as Metric events on its
// session and is exported here as cure_node_metric{node, run, name, unit,
// device}. The coordinator is the node's durable vantage point: a node in
// CURE runs no exporter of its own.
//
// Cardinality is bounded three ways: a run may hold NodeSeriesPerRun series
// (a new series beyond it is dropped and counted), all runs together
// NodeSeriesMax; a run's series go NodeSeriesLinger after the run ends, and
// any series not updated for NodeSeriesTTL goes at the next scrape. Names and
// label values come from the node, which may be hostile: they are reduced to
// a small alphabet and bounded in length.

var nodeDesc = prometheus.NewDesc(Namespace+"_node_metric",
	"Latest value of a metric the node's runner streamed, by node, run, metric name, unit and device (gpu/3, disk/nvme0n1...). "+
		"Series are dropped when their run ends (after a short linger) or when not updated for the TTL.",
	[]string{"node", "run", "name", "unit", "device"}, nil)

var droppedDesc = prometheus.NewDesc(Namespace+"_node_metric_samples_dropped_total",
	"Node metric samples not exported because their run or the coordinator reached its series cap.", nil, nil)

var seriesDesc = prometheus.NewDesc(Namespace+"_node_metric_series",
	"Node metric series held now.", nil, nil)

type seriesKey struct{ name, unit, device string }

type sample struct {
	value   float64
	updated time.Time
}

type runSeries struct {
	node   string
	series map[seriesKey]*sample
	ended  time.Time // zero while the run is active
}

type nodeMetrics struct {
	o       Options
	mu      sync.Mutex
	runs    map[string]*runSeries
	total   int
	dropped float64
}

func newNodeMetrics(o Options) *nodeMetrics {
	return &nodeMetrics{o: o, runs: map[string]*runSeries{}}
}

// deviceKeys are the runner label keys that name a device, in order of
// preference; the first present becomes the device label ("gpu/3").
var deviceKeys = []string{"gpu", "disk", "nic", "nvme", "dpu", "component", "device", "stage"}

func (n *nodeMetrics) record(node, run, name, unit string, labels map[string]string, value float64) {
	name = cleanLabel(name, 64)
	if name == "" || run == "" {
		return
	}
	key := seriesKey{name: name, unit: cleanLabel(unit, 16), device: device(labels)}
	now := n.o.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.runs[run]
	if rs == nil {
		rs = &runSeries{node: node, series: map[seriesKey]*sample{}}
		n.runs[run] = rs
	}
	s := rs.series[key]
	if s == nil {
		if len(rs.series) >= n.o.NodeSeriesPerRun || n.total >= n.o.NodeSeriesMax {
			n.dropped++
			return
		}
		s = &sample{}
		rs.series[key] = s
		n.total++
	}
	s.value, s.updated = value, now
}

func (n *nodeMetrics) runEnded(run string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if rs := n.runs[run]; rs != nil && rs.ended.IsZero() {
		rs.ended = n.o.Now()
	}
}

func (n *nodeMetrics) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expireLocked(n.o.Now())
	return n.total
}

// expireLocked drops finished runs past their linger and stale series.
func (n *nodeMetrics) expireLocked(now time.Time) {
	for run, rs := range n.runs {
		if !rs.ended.IsZero() && now.Sub(rs.ended) >= n.o.NodeSeriesLinger {
			n.total -= len(rs.series)
			delete(n.runs, run)
			continue
		}
		for k, s := range rs.series {
			if now.Sub(s.updated) >= n.o.NodeSeriesTTL {
				delete(rs.series, k)
				n.total--
			}
		}
		if len(rs.series) == 0 {
			delete(n.runs, run)
		}
	}
}

func (n *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeDesc
	ch <- droppedDesc
	ch <- seriesDesc
}

func (n *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	n.mu.Lock()
	n.expireLocked(n.o.Now())
	type row struct {
		labels []string
		v      float64
	}
	rows := make([]row, 0, n.total)
	for run, rs := range n.runs {
		for k, s := range rs.series {
			rows = append(rows, row{[]string{rs.node, run, k.name, k.unit, k.device}, s.value})
		}
	}
	dropped, total := n.dropped, n.total
	n.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		return strings.Join(rows[i].labels, "\x00") < strings.Join(rows[j].labels, "\x00")
	})
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(nodeDesc, prometheus.GaugeValue, r.v, r.labels...)
	}
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, dropped)
	ch <- prometheus.MustNewConstMetric(seriesDesc, prometheus.GaugeValue, float64(total))
}

func device(labels map[string]string) string {
	for _, k := range deviceKeys {
		if v, ok := labels[k]; ok {
			return k + "/" + cleanLabel(v, 48)
		}
	}
	return ""
}

// cleanLabel keeps letters, digits and . _ - / : of s (others become _),
// lowercased, at most n bytes: a node cannot write control characters,
// quotes or megabytes into the exposition.
func cleanLabel(s string, n int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() >= n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == '/', r == ':', r == '%':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
