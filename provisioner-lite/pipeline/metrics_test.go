package pipeline_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// TestMetricsEndpoint drives a provision run through the pipeline fixture
// (one scripted BMC login failure, one 503 the transport retries, one failed os_install attempt, an install
// throughput sample from the runner), fetches an artifact from the boot
// server, then scrapes /metrics over HTTP and parses it as Prometheus does.
func TestMetricsEndpoint(t *testing.T) {
	f := newFixture(t, nil)
	f.failConnects = 1
	f.bmc.Fail503(1) // the BMC sheds one request: the transport retries it
	f.phaseStatus = func(p modes.PhaseName, attempt int) curev1.PhaseStatus {
		if p == modes.OSInstall && attempt == 1 {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}

	// The boot server counts the bytes it sends.
	bs, err := bootserver.New(bootserver.Config{ImageDir: t.TempDir(), ArtifactDir: filepath.Join(f.dir, "artifacts"), BaseURL: "http://10.0.2.2:8080",
		Served: f.metrics.ArtifactServed}, f.eng)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(f.dir, "artifacts", "sha256"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("artifacts: %v, %d files", err, len(ents))
	}
	rec := httptest.NewRecorder()
	bs.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/artifacts/sha256/"+ents[0].Name(), nil))
	if rec.Code != 200 || rec.Body.Len() == 0 {
		t.Fatalf("artifact GET = %d, %d bytes", rec.Code, rec.Body.Len())
	}
	served := rec.Body.Len()

	h := &metrics.Health{StoreCheck: f.st.Ping}
	h.Listener("metrics", true)
	srv := httptest.NewServer(metrics.Mux(f.metrics, h))
	defer srv.Close()
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s = %d %s", p, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}

	// Every family with the labels it must carry and one sample that must
	// be there after this run.
	want := []struct {
		name   string
		labels []string
		has    map[string]string
	}{
		{"cure_runs_started_total", []string{"mode"}, map[string]string{"mode": "provision"}},
		{"cure_runs_ended_total", []string{"mode", "status"}, map[string]string{"mode": "provision", "status": "succeeded"}},
		{"cure_runs_active", []string{"mode"}, map[string]string{"mode": "provision"}},
		{"cure_phase_duration_seconds", []string{"phase", "sku", "status"}, map[string]string{"phase": string(modes.OSInstall), "sku": "qemu-nvme", "status": "failed"}},
		{"cure_run_reboots", []string{"mode"}, map[string]string{"mode": "provision"}},
		{"cure_retries_total", []string{"phase", "cause"}, map[string]string{"phase": string(modes.OSInstall), "cause": metrics.CausePhaseFailed}},
		{"cure_redfish_call_duration_seconds", []string{"vendor", "operation"}, map[string]string{"vendor": "cure", "operation": "set_boot_override"}},
		{"cure_redfish_errors_total", []string{"vendor", "operation"}, map[string]string{"vendor": "unknown", "operation": "connect"}},
		{"cure_redfish_http_retries_total", []string{"code"}, map[string]string{"code": "503"}},
		{"cure_runners_connected", nil, nil},
		{"cure_runner_sessions_total", []string{"result"}, map[string]string{"result": "accepted"}},
		{"cure_event_lag_seconds", []string{"kind"}, map[string]string{"kind": string(runstate.EventPhaseEnd)}},
		{"cure_artifact_bytes_served_total", []string{"kind"}, map[string]string{"kind": "artifact"}},
		{"cure_store_commit_duration_seconds", nil, nil},
		{"cure_store_commit_writes", nil, nil},
		{"cure_node_metric", []string{"node", "run", "name", "unit", "device"},
			map[string]string{"node": "node1", "run": runID, "name": "write_throughput", "unit": "mb/s", "device": "disk/nvme0n1"}},
		{"cure_node_metric_series", nil, nil},
	}
	for _, w := range want {
		fam := fams[w.name]
		if fam == nil || len(fam.GetMetric()) == 0 {
			t.Errorf("%s: missing from /metrics", w.name)
			continue
		}
		for _, m := range fam.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			sort.Strings(got)
			wl := slices.Clone(w.labels)
			sort.Strings(wl)
			if !slices.Equal(got, wl) {
				t.Errorf("%s: labels %v, want %v", w.name, got, wl)
			}
		}
		if w.has != nil && find(fam, w.has) == nil {
			t.Errorf("%s: no series %v among %d", w.name, w.has, len(fam.GetMetric()))
		}
	}
	if m := find(fams["cure_node_metric"], map[string]string{"run": runID, "name": "write_throughput"}); m != nil && m.GetGauge().GetValue() != 512 {
		t.Errorf("node metric = %v, want 512", m.GetGauge().GetValue())
	}
	if m := find(fams["cure_artifact_bytes_served_total"], map[string]string{"kind": "artifact"}); m != nil && m.GetCounter().GetValue() != float64(served) {
		t.Errorf("artifact bytes = %v, want %d", m.GetCounter().GetValue(), served)
	}
	if m := find(fams["cure_runs_active"], map[string]string{"mode": "provision"}); m != nil && m.GetGauge().GetValue() != 0 {
		t.Errorf("runs_active after the run = %v, want 0", m.GetGauge().GetValue())
	}
	if m := find(fams["cure_run_reboots"], map[string]string{"mode": "provision"}); m != nil && m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("run_reboots observed %d runs, want 1", m.GetHistogram().GetSampleCount())
	}
	// The scripted login failure was a phase retry of its own.
	retries := 0.0
	for _, m := range fams["cure_retries_total"].GetMetric() {
		retries += m.GetCounter().GetValue()
	}
	if retries != 2 {
		t.Errorf("retries_total = %v, want 2 (the failed login, the failed os_install)", retries)
	}
	for _, m := range fams["cure_redfish_call_duration_seconds"].GetMetric() {
		if v := label(m, "vendor"); !strings.Contains("cure unknown", v) {
			t.Errorf("vendor label %q: the virtual BMC says Manufacturer CURE", v)
		}
	}
}

func find(fam *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range want {
			if label(m, k) != v {
				ok = false
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
