package metrics

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// Node series are capped per run and in total, dropped a linger after
// their run ends and after the TTL when their run never ends.
func TestNodeSeriesBounded(t *testing.T) {
	c := &clock{time.Unix(1_700_000_000, 0)}
	m := New(Options{NodeSeriesPerRun: 3, NodeSeriesMax: 5, NodeSeriesTTL: 10 * time.Minute, NodeSeriesLinger: time.Minute, Now: c.now})
	for g := range 5 {
		m.NodeMetric("n1", "r1", "gpu_temp", "C", map[string]string{"gpu": string(rune('0' + g))}, 70)
	}
	if got := m.NodeSeries(); got != 3 {
		t.Fatalf("run r1 holds %d series, cap 3", got)
	}
	for g := range 4 {
		m.NodeMetric("n2", "r2", "gpu_temp", "C", map[string]string{"gpu": string(rune('0' + g))}, 70)
	}
	if got := m.NodeSeries(); got != 5 {
		t.Fatalf("%d series, total cap 5", got)
	}
	if s := scrape(t, m); !strings.Contains(s, "cure_node_metric_samples_dropped_total 4") ||
		!strings.Contains(s, `cure_node_metric{device="gpu/0",name="gpu_temp",node="n1",run="r1",unit="c"} 70`) {
		t.Errorf("exposition:\n%s", s)
	}
	m.RunEnded("r1", "provision", "succeeded", 2)
	c.t = c.t.Add(30 * time.Second)
	if got := m.NodeSeries(); got != 5 {
		t.Errorf("within the linger: %d series, want 5", got)
	}
	c.t = c.t.Add(31 * time.Second)
	if got := m.NodeSeries(); got != 2 {
		t.Errorf("after the linger: %d series, want r2's 2", got)
	}
	m.NodeMetric("n2", "r2", "gpu_temp", "C", map[string]string{"gpu": "0"}, 71) // fresh
	c.t = c.t.Add(9 * time.Minute)                                               // the others are now 10m1s old
	if got := m.NodeSeries(); got != 1 {
		t.Errorf("after the TTL: %d series, want the one updated", got)
	}
}

func TestVendorFolded(t *testing.T) {
	for in, want := range map[string]string{"Dell Inc.": "dell", "HPE": "hpe", "Hewlett Packard Enterprise": "hpe", "Supermicro": "supermicro",
		"American Megatrends International": "ami", "CURE": "cure", "": "unknown", "Evil\"}\n corp": "other", "hpx": "other"} {
		if got := Vendor(in); got != want {
			t.Errorf("Vendor(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNodeMetric: whatever a runner sends as a metric name, unit or
// labels, the exposition stays valid and parseable and label values stay
// short and plain.
func FuzzNodeMetric(f *testing.F) {
	f.Add("gpu_temp", "C", "gpu", "3", 71.5)
	f.Add("os_install.throughput", "MB/s", "disk", "nvme0n1", 1e3)
	f.Add("a\"b\nc{d}", "\x00\xff", "device", strings.Repeat("x", 500), -1.0)
	f.Fuzz(func(t *testing.T, name, unit, key, val string, v float64) {
		m := New(Options{})
		m.NodeMetric("node-1", "run-1", name, unit, map[string]string{key: val}, v)
		s := scrape(t, m)
		var p expfmt.TextParser
		fams, err := p.TextToMetricFamilies(strings.NewReader(s))
		if err != nil {
			t.Fatalf("exposition does not parse: %v\n%s", err, s)
		}
		for _, mm := range fams["cure_node_metric"].GetMetric() {
			for _, l := range mm.GetLabel() {
				if len(l.GetValue()) > 64 || strings.ContainsAny(l.GetValue(), "\"\\\n{}= ") {
					t.Errorf("label %s=%q", l.GetName(), l.GetValue())
				}
			}
		}
	})
}

// The Grafana dashboard queries only metrics this package defines.
func TestGrafanaDashboardUsesKnownMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana/cure-coordinator.json")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Options{})
	// Families without samples are not gathered: describe instead.
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range []prometheus.Collector{m.runsStarted, m.runsEnded, m.runsActive, m.phaseDuration, m.runReboots, m.retries, m.redfishDuration,
			m.redfishErrors, m.redfishRetries, m.runnersConnected, m.runnerSessions, m.eventLag, m.artifactBytes, m.commitDuration, m.commitOps, m.webhooks, m.bootStage, m.nodes} {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
		known[name] = true
	}
	used := regexp.MustCompile(`cure_[a-z_]+`).FindAllString(string(raw), -1)
	if len(used) < 10 {
		t.Fatalf("only %d metric references", len(used))
	}
	for _, u := range used {
		base := u
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(u, suf); ok && known[b] {
				base = b
			}
		}
		if !known[base] && u != "cure_coordinator" {
			t.Errorf("dashboard queries %s: no such metric", u)
		}
	}
}
