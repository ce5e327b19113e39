package dashboard_test

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/dashboard"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestDashboardFleetPlot: a node page whose run was judged against its
// fleet shows the distribution as server-rendered SVG with the median and
// the node's component marked, the MARGINAL judgement first, and no inline
// script or style anywhere (the page's CSP allows neither).
func TestDashboardFleetPlot(t *testing.T) {
	st := fleetStore(t, 2)
	low := 182.2
	rec := &curev1.FleetJudgements{
		Judgements: []*curev1.FleetJudgement{{Component: "disk/nvme0n1", Check: "disk-read", Metric: "readMBps", Unit: "MB/s", Value: 41,
			Applied: true, Marginal: true, BandLow: &low, Below: 3, MinNodes: 3,
			Message: "readMBps=41 MB/s, fleet median 200 MB/s (n=3), band >= 182 MB/s (3.0 MAD), percentile 0"}},
		Distributions: []*curev1.FleetDistribution{{Sku: "l40s-2u", Check: "disk-read", Metric: "readMBps", Unit: "MB/s", Nodes: 3, Samples: 3,
			Median: 200, Mad: 5.93, Values: []float64{196, 200, 206}, Marks: []*curev1.FleetNodeMark{{NodeId: "node-0001", Component: "disk/nvme0n1", Value: 41}}}},
	}
	js, err := protojson.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	marginal := store.Verdict{Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_MARGINAL, Message: "outside the fleet band: " + rec.Judgements[0].Message}
	if err := st.PutFleetJudgement(t.Context(), "run-node-0001", []store.Verdict{marginal}, js); err != nil {
		t.Fatal(err)
	}
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/nodes/node-0001", nil))
	if w.Code != 200 {
		t.Fatalf("node page: %d", w.Code)
	}
	body := w.Body.String()
	for _, want := range []string{`<section id="fleet">`, `class="fleet-plot"`, `class="median"`, `median 200 MB/s (n=3)`,
		`class="node-mark"`, `disk/nvme0n1 41 MB/s (percentile 0)`, `class="band"`, `<td>MARGINAL</td>`, `v-MARGINAL`} {
		if !strings.Contains(body, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	if !strings.Contains(w.Header().Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("CSP %q", w.Header().Get("Content-Security-Policy"))
	}
	for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
		if !strings.Contains(m, `src="/assets/`) {
			t.Errorf("inline script: %s", m)
		}
	}
	if regexp.MustCompile(`(?i)\sstyle=|<style|\son[a-z]+=`).MatchString(body) {
		t.Error("inline style or event handler on the page")
	}
}
