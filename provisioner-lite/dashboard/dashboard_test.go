package dashboard_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/dashboard"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fleetStore holds n nodes; every 7th has a failed run, every 3rd a
// running one, the rest succeeded runs with phases and verdicts.
func fleetStore(t testing.TB, n int) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	phases := []modes.PhaseName{modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.WaitForCURE, modes.BIOS, modes.NVMe, modes.OSInstall, modes.WaitForHostOS}
	for i := range n {
		id := fmt.Sprintf("node-%04d", i)
		sku := []string{"h100-hgx", "l40s-2u"}[i%2]
		if err := st.UpsertNode(ctx, store.Node{ID: id, SKU: sku, BMCURL: "https://10.1.0.1", BMCUser: "admin", BMCPassword: "s3cret-bmc-password",
			MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256)}, Labels: map[string]string{"rack": fmt.Sprintf("r%02d", i/40)}}); err != nil {
			t.Fatal(err)
		}
		status, phase := curev1.RunStatus_RUN_SUCCEEDED, modes.WaitForHostOS
		switch {
		case i%7 == 0:
			status, phase = curev1.RunStatus_RUN_FAILED, modes.OSInstall
		case i%3 == 0:
			status, phase = curev1.RunStatus_RUN_RUNNING, modes.BIOS
		}
		r := store.Run{ID: "run-" + id, NodeID: id, Mode: "provision", Status: status, Phase: phase, StartedAt: t0, Reboots: 3,
			Message: map[curev1.RunStatus]string{curev1.RunStatus_RUN_FAILED: "os_install failed 2 times: write /dev/nvme0n1: I/O error"}[status]}
		if status != curev1.RunStatus_RUN_RUNNING {
			r.EndedAt = t0.Add(40 * time.Minute)
		}
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if i >= 50 {
			continue // phases for the first nodes only: enough for the node pages, fast to build
		}
		at := t0.Add(5 * time.Second)
		for j, p := range phases {
			d := time.Duration(j+1) * 40 * time.Second
			ps := store.Phase{RunID: r.ID, Name: p, Status: curev1.PhaseStatus_PHASE_OK, Attempts: 1, StartedAt: at, EndedAt: at.Add(d)}
			if p == phase && status != curev1.RunStatus_RUN_SUCCEEDED {
				ps.Status, ps.EndedAt = map[curev1.RunStatus]curev1.PhaseStatus{curev1.RunStatus_RUN_FAILED: curev1.PhaseStatus_PHASE_FAILED, curev1.RunStatus_RUN_RUNNING: curev1.PhaseStatus_PHASE_RUNNING}[status], time.Time{}
				if status == curev1.RunStatus_RUN_FAILED {
					ps.EndedAt = at.Add(d)
				}
			}
			if err := st.UpsertPhase(ctx, ps); err != nil {
				t.Fatal(err)
			}
			if p == phase && status != curev1.RunStatus_RUN_SUCCEEDED {
				break
			}
			at = at.Add(d + time.Second)
		}
		if _, _, err := st.AppendEvent(ctx, store.Event{RunID: r.ID, NodeID: id, Source: "coordinator", Kind: "info", Phase: modes.BIOS,
			Time: t0.Add(7 * time.Minute), Message: "re-armed PXE once and reset the host: BIOS settings apply on reset"}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []store.Verdict{{Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_MATCH, Observed: "7.2"}, {Component: "gpu/3", Check: "temperature", Status: curev1.VerdictStatus_FAIL, Observed: "92C", Expected: "<85C"}} {
			v.RunID, v.Time = r.ID, at
			if err := st.PutVerdict(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return st
}

func viewer(*http.Request) (dashboard.Viewer, error) {
	return dashboard.Viewer{Name: "alice", Role: pki.RoleViewer}, nil
}

func artifactsDir(t *testing.T) string {
	dir := t.TempDir()
	if d := os.Getenv("CURE_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, t.Name())
	} else if _, err := os.Stat("../../out"); err == nil {
		dir = filepath.Join("../../out/test-artifacts", t.Name())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboardInChromium drives Debian's headless Chromium over the
// dashboard: the fleet page renders (failures first), a run changing in
// the store shows on the page without a reload, the node page renders its
// Gantt, buckets and verdicts; a screenshot of each is saved.
func TestDashboardInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (scripts/install-deps.sh installs it)")
	}
	// CURE_DASH_NODES=5000 measures the page at fleet scale (the exact
	// counts are checked at the default 300 only).
	nodes := 300
	if v, err := strconv.Atoi(os.Getenv("CURE_DASH_NODES")); err == nil && v > 0 {
		nodes = v
	}
	st := fleetStore(t, nodes)
	srv := httptest.NewServer(dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet, Interval: 200 * time.Millisecond}))
	defer srv.Close()
	out := artifactsDir(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// No timeout on the first Run's context (it would stop the browser):
	// each step below gets its own.
	step := func(what string, d time.Duration, f func(ctx context.Context) error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := f(sctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	var first, status, chips, target string
	var fleetPNG, nodePNG []byte
	start := time.Now()
	step("fleet page", 30*time.Second, func(ctx context.Context) (err error) {
		if _, err = chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
			return err
		}
		if _, err = chromedp.Run(ctx, chromedp.WaitVisible("#fleet tbody tr")); err != nil {
			return err
		}
		if _, err = chromedp.Run(ctx, chromedp.WaitVisible("#live.on")); err != nil { // the event stream is connected
			return err
		}
		if first, err = chromedp.Run(ctx, chromedp.Text("#fleet tbody tr:first-child .status")); err != nil {
			return err
		}
		if chips, err = chromedp.Run(ctx, chromedp.Text("#by-status")); err != nil {
			return err
		}
		target, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#fleet tbody tr:first-child").dataset.node`))
		return err
	})
	t.Logf("fleet page (%d nodes, 100 rows) loaded and live in %s", nodes, time.Since(start).Round(time.Millisecond))
	if first != "failed" {
		t.Errorf("first row is %q: failures come first", first)
	}
	if nodes == 300 && (!strings.Contains(chips, "failed 43") || !strings.Contains(chips, "running")) {
		t.Errorf("status counts %q", chips)
	}

	// The first row's run turns to needing attention in the store: the open
	// page shows it.
	bg := context.Background()
	r, err := st.GetRun(bg, "run-"+target)
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.Phase, r.Message, r.EndedAt = curev1.RunStatus_RUN_ATTENTION, modes.BIOS, "BIOS settings did not apply", time.Now().UTC()
	if err := st.UpdateRun(bg, r); err != nil {
		t.Fatal(err)
	}
	step("live update", 30*time.Second, func(ctx context.Context) (err error) {
		if _, err = chromedp.Run(ctx, chromedp.WaitVisible("#n-"+target+".st-attention")); err != nil {
			return err
		}
		if status, err = chromedp.Run(ctx, chromedp.Text("#n-"+target+" .status")); err != nil {
			return err
		}
		if chips, err = chromedp.Run(ctx, chromedp.Text("#by-status")); err != nil {
			return err
		}
		reloaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`performance.getEntriesByType("navigation").length !== 1 || !document.body.dataset.updated`))
		if err == nil && reloaded {
			err = fmt.Errorf("the page reloaded or was not updated by the event stream")
		}
		if err != nil {
			return err
		}
		fleetPNG, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		return err
	})
	if status != "attention" || !strings.Contains(chips, "attention 1") {
		t.Errorf("after the update: row %q, counts %q", status, chips)
	}

	// A wipe verdict's detail is long and has long unbroken words (device
	// paths, markers): the page wraps it instead of scrolling sideways.
	if err := st.PutVerdict(bg, store.Verdict{RunID: "run-node-0001", Component: "nvme0n1", Check: "wipe", Status: curev1.VerdictStatus_PASS, Time: time.Now(),
		Message: "format (user-data erase) verified: marker " + strings.Repeat("c0ffee", 40) + " gone from /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_" + strings.Repeat("SERIAL", 20)}); err != nil {
		t.Fatal(err)
	}
	var bars, reboots int
	var verdict string
	var sideways bool
	var rma chromedp.AttributeResult
	step("node page", 30*time.Second, func(ctx context.Context) (err error) {
		if _, err = chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/nodes/node-0001")); err != nil {
			return err
		}
		if _, err = chromedp.Run(ctx, chromedp.WaitVisible("#gantt .bar")); err != nil {
			return err
		}
		if bars, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#gantt .bar").length`)); err != nil {
			return err
		}
		if reboots, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#gantt .reboot").length`)); err != nil {
			return err
		}
		if verdict, err = chromedp.Run(ctx, chromedp.Text(".verdicts tbody tr:first-child")); err != nil {
			return err
		}
		if rma, err = chromedp.Run(ctx, chromedp.AttributeValue("#rma", "href")); err != nil {
			return err
		}
		if sideways, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`)); err != nil {
			return err
		}
		nodePNG, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		return err
	})
	if bars != 8 || reboots != 2 || !strings.Contains(verdict, "FAIL") || !strings.HasPrefix(rma.Value, "/nodes/node-0001/report?run=") {
		t.Errorf("node page: %d bars, %d reboot marks (want the power-on and the BIOS reset), first verdict %q, report link %q", bars, reboots, verdict, rma.Value)
	}
	if sideways {
		t.Error("the node page scrolls sideways: a long verdict detail is not wrapped")
	}
	for name, png := range map[string][]byte{"fleet.png": fleetPNG, "node.png": nodePNG} {
		if len(png) < 1000 {
			t.Errorf("%s: %d bytes", name, len(png))
		}
		if err := os.WriteFile(filepath.Join(out, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", out)
}

// Every page refuses a request Auth refuses, and anything but GET.
func TestDashboardAuthAndReadOnly(t *testing.T) {
	st := fleetStore(t, 3)
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: dashboard.CertViewer, Log: quiet})
	for _, p := range []string{"/", "/nodes/node-0001", "/nodes/node-0001/report", "/events", "/assets/app.js"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without a certificate: %d", p, rec.Code)
		}
	}
	h = dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(m, "/", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s /: %d", m, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0001", nil))
	body := rec.Body.String()
	if rec.Code != 200 || strings.Contains(body, "s3cret-bmc-password") || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("node page: %d, CSP %q, password shown: %t", rec.Code, rec.Header().Get("Content-Security-Policy"), strings.Contains(body, "s3cret"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0001/report", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "run-node-0001") {
		t.Errorf("RMA report: %d", rec.Code)
	}
}

// The real sign-in: an operator certificate from the coordinator CA over
// mTLS is a viewer; another CA's certificate never gets a page.
func TestDashboardMTLS(t *testing.T) {
	st := fleetStore(t, 3)
	dir := t.TempDir()
	caPEM, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg = dashboard.TLSConfig(tlsCfg)
	srv := httptest.NewUnstartedServer(dashboard.Handler(dashboard.Config{Store: st, Auth: dashboard.CertViewer, Log: quiet}))
	srv.TLS = tlsCfg
	srv.StartTLS()
	defer srv.Close()
	if _, err := pki.IssueOperatorCert(dir, "bob", pki.RoleViewer); err != nil {
		t.Fatal(err)
	}
	cf, kf := pki.OperatorCertFiles(dir, "bob")
	cert, err := pki.LoadOperatorCert(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *tls.Certificate) (int, error) {
		cc, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", c)
		if err != nil {
			return 0, err
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cc}, Timeout: 10 * time.Second}
		resp, err := hc.Get(srv.URL + "/")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(&cert); err != nil || code != 200 {
		t.Errorf("operator certificate: %d, %v", code, err)
	}
	if code, err := get(nil); err == nil {
		t.Errorf("no certificate: HTTP %d, want the TLS handshake refused", code)
	}
	other := t.TempDir()
	if _, err := pki.EnsureCA(other); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.IssueOperatorCert(other, "mallory", pki.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	cf, kf = pki.OperatorCertFiles(other, "mallory")
	foreign, err := pki.LoadOperatorCert(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get(&foreign); err == nil {
		t.Errorf("another CA's certificate: HTTP %d", code)
	}
}

// BenchmarkFleetPage5000 renders the fleet page of 5,000 nodes (one page
// of 100 rows, aggregated on the server) and reports its weight.
func BenchmarkFleetPage5000(b *testing.B) {
	st := fleetStore(b, 5000)
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "page-bytes")
}

// The node page shows the hardware the runner reported at its latest boot,
// escaped: a hostile runner's strings never become markup.
func TestDashboardNodeInventory(t *testing.T) {
	st := fleetStore(t, 2)
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0001", nil))
		if rec.Code != 200 {
			t.Fatalf("node page: %d", rec.Code)
		}
		return rec.Body.String()
	}
	if body := get(); !strings.Contains(body, "No hardware reported yet") {
		t.Errorf("node page without an inventory does not say so")
	}
	js := `{"system":{"vendor":"Supermicro","product":"AS-8125GS","serial":"S4XY<script>x</script>","biosVersion":"2.1"},` +
		`"gpus":[{"pciAddress":"0000:c1:00.0","name":"H100 SXM5"}],"cpuCount":224}`
	if _, err := st.PutInventory(t.Context(), store.InventoryRecord{NodeID: "node-0001", RunID: "run-node-0001", BootID: "boot-1",
		Time: time.Now(), Peer: "10.0.0.9", JSON: []byte(js)}); err != nil {
		t.Fatal(err)
	}
	body := get()
	for _, want := range []string{"AS-8125GS", "0000:c1:00.0", "H100 SXM5", "224", "boot-1", "S4XY&lt;script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>x</script>") {
		t.Error("inventory text rendered as markup")
	}
}

// TestDashboardNodeSuiteProgress: a node in a suite shows each check's
// progress and the ETA from its runner's latest heartbeat.
func TestDashboardNodeSuiteProgress(t *testing.T) {
	st := fleetStore(t, 4)
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	js := `{"suite":"burnin-72h","stage":"load","elapsedMs":"36000000","plannedMs":"259200000","remainingMs":"223200000",` +
		`"checks":[{"check":"cpu-soak","stage":"load","state":"running","elapsedMs":"32400000","plannedMs":"129600000"},` +
		`{"check":"smart-before","stage":"before","state":"done","worst":"PASS"}]}`
	if _, err := st.PutProgress(t.Context(), store.ProgressRecord{RunID: "run-node-0003", BootID: "b1", Seq: 7, Phase: modes.Validate,
		Time: time.Now(), Received: time.Now(), JSON: []byte(js)}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0003", nil))
	body := rec.Body.String()
	for _, want := range []string{`id="suite"`, "suite burnin-72h · stage load · 1/2 checks done, 1 running", "eta 62h0m0s", "cpu-soak", `value="25"`, "smart-before"} {
		if !strings.Contains(body, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
}

// The node page lists the coordinator's warnings on the run (a network
// boot request from a MAC not in the inventory while the node waits for
// CURE), escaped like any text.
func TestDashboardNodeWarnings(t *testing.T) {
	st := fleetStore(t, 4)
	msg := "iPXE request from 52:54:00:c0:de:99 from 10.0.0.7, a MAC not in the node inventory, while this node waits for CURE: <b>x</b>"
	if _, _, err := st.AppendEvent(t.Context(), store.Event{RunID: "run-node-0003", NodeID: "node-0003", Source: runstate.SourceCoordinator,
		Kind: runstate.EventLog, Status: "WARN", Phase: modes.WaitForCURE, Time: time.Now(), Message: msg}); err != nil {
		t.Fatal(err)
	}
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0003", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(body, `id="warnings"`) || !strings.Contains(body, "wait_for_cure</span> iPXE request from 52:54:00:c0:de:99") ||
		!strings.Contains(body, "&lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("node page %d lacks the warning:\n%s", rec.Code, body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nodes/node-0001", nil))
	if strings.Contains(rec.Body.String(), `id="warnings"`) {
		t.Error("a run without warnings shows a warnings section")
	}
}

// TestDashboardPool: the fleet table and the node page show a node's pool
// state; the reason is escaped like any stored text.
func TestDashboardPool(t *testing.T) {
	st := fleetStore(t, 2)
	if _, err := st.SetNodePool(t.Context(), store.NodePool{NodeID: "node-0001", State: "draining", Actor: "alice", Reason: "bios <b>day</b>"}); err != nil {
		t.Fatal(err)
	}
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet})
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	fleet := get("/")
	if !strings.Contains(fleet, `<td class="pool">draining</td>`) || !strings.Contains(fleet, `<td class="pool">-</td>`) {
		t.Errorf("fleet page lacks the pool states:\n%s", fleet)
	}
	node := get("/nodes/node-0001")
	if !strings.Contains(node, "pool <b>draining</b>") || !strings.Contains(node, "by alice: bios &lt;b&gt;day&lt;/b&gt;") {
		t.Errorf("node page lacks the pool state:\n%s", node)
	}
}

// TestDashboardNodeAdmission: the node page lists the node's admission
// requirements, met or not, and says so when they could not be judged.
func TestDashboardNodeAdmission(t *testing.T) {
	st := fleetStore(t, 2)
	res := &admission.Result{Decision: admission.Refuse, Requirements: []admission.Requirement{
		{Name: admission.ReqBootPath, State: admission.Met, RunID: "r1", Detail: "booted by uefi-https"},
		{Name: admission.ReqAcceptance, State: admission.Failed, RunID: "r2", Detail: "suite burnin run r2 failed", Evidence: "bmc/psu/PSU2 psu <FAIL>"},
	}}
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: viewer, Log: quiet, Admission: func(_ context.Context, id string) (*admission.Result, error) {
		if id == "node-0000" {
			return nil, errors.New("store unreachable")
		}
		return res, nil
	}})
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Body.String()
	}
	node := get("/nodes/node-0001")
	for _, want := range []string{"admission · refuse", `<tr class="adm-failed"><td>acceptance</td><td>failed</td><td>r2</td>`, "[bmc/psu/PSU2 psu &lt;FAIL&gt;]"} {
		if !strings.Contains(node, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	if n := get("/nodes/node-0000"); !strings.Contains(n, "admission could not be judged: store unreachable") {
		t.Error("node page hides an admission that could not be judged")
	}
}
