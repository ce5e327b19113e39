package redfish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// fwPackage builds a test firmware package (vbmc's format).
func fwPackage(component, version string, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	h := vbmc.PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	return append(h.Line(), payload...)
}

// artifactServer plays the coordinator's artifact server.
func artifactServer(t *testing.T, files map[string][]byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func fastOOB(cfg vbmc.Config) vbmc.Config {
	cfg.TaskDuration = 100 * time.Millisecond
	cfg.ResetDuration = 300 * time.Millisecond
	return cfg
}

func inventoryItem(t *testing.T, c *Client, id string) FirmwareItem {
	t.Helper()
	inv, err := c.FirmwareInventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(inv, func(f FirmwareItem) bool { return f.ID == id })
	if i < 0 {
		t.Fatalf("inventory has no %s: %+v", id, inv)
	}
	return inv[i]
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestChooseTransferProtocol(t *testing.T) {
	for _, tc := range []struct {
		uri, asked string
		allowed    []string
		want, err  string
	}{
		{"http://a/x", "", []string{"HTTP", "HTTPS"}, "HTTP", ""},
		{"https://a/x", "", nil, "HTTPS", ""},
		{"a/x", "HTTP", []string{"HTTP"}, "HTTP", ""},
		{"http://a/x", "", []string{"HTTPS", "SFTP"}, "", "not in the BMC's allowable values [HTTPS SFTP]"},
		{"http://a/x", "https", nil, "", "disagrees"},
		{"a/x", "", nil, "", "no scheme"},
	} {
		got, err := ChooseTransferProtocol(tc.uri, tc.asked, tc.allowed)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s/%s/%v: %q %v, want %q %q", tc.uri, tc.asked, tc.allowed, got, err, tc.want, tc.err)
		}
	}
}

func TestUpdateServiceCapabilities(t *testing.T) {
	_, _, _, url := bmcServer(t, fastOOB(vbmc.Config{TransferProtocols: []string{"HTTPS"}, NoMultipart: true}), nil)
	c := connect(t, url, 5*time.Second)
	caps, err := c.UpdateService(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !caps.SimpleUpdate || !slices.Equal(caps.TransferProtocols, []string{"HTTPS"}) || caps.MultipartPushURI != "" || caps.InventoryURI == "" {
		t.Fatalf("caps = %+v", caps)
	}
	if _, err := c.SimpleUpdate(context.Background(), "http://10.0.2.2/x.fw", nil, ""); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("HTTP image on an HTTPS-only BMC: %v, want ErrNotSupported", err)
	}
	if _, err := c.MultipartPush(context.Background(), strings.NewReader("x"), 1, nil); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("push without MultipartHttpPushUri: %v", err)
	}
}

// Every answer shape a BMC uses for an accepted update ends in the same
// place: the task's final state, then the version after activation.
func TestSimpleUpdateShapes(t *testing.T) {
	art := artifactServer(t, map[string][]byte{"/bios.fw": fwPackage("BIOS", "P80 v1.00", []byte("bios"))})
	for _, shape := range []vbmc.TaskShape{vbmc.ShapeMonitor, vbmc.ShapeTaskLocation, vbmc.ShapeTaskBody} {
		t.Run(string(shape)+"_", func(t *testing.T) {
			b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{TaskShape: shape}), nil)
			c := connect(t, url, 5*time.Second)
			ctx := waitCtx(t)
			job, err := c.SimpleUpdate(ctx, art+"/bios.fw", []string{"BIOS"}, "")
			if err != nil {
				t.Fatal(err)
			}
			if job.MonitorURI == "" && job.TaskURI == "" {
				t.Fatalf("job with nothing to follow: %+v", job)
			}
			res, err := c.WaitTask(ctx, job, 30*time.Millisecond)
			if err != nil || res.State != "Completed" || res.PercentComplete != 100 {
				t.Fatalf("WaitTask = %+v, %v", res, err)
			}
			if it := inventoryItem(t, c, "BIOS"); it.Version != "P79 v1.45" || it.PendingVersion != "P80 v1.00" {
				t.Fatalf("staged BIOS = %+v, want the old version running and the new one pending", it)
			}
			if err := c.PowerOn(ctx); err != nil { // BIOS activates on the host boot
				t.Fatal(err)
			}
			if it := inventoryItem(t, c, "BIOS"); it.Version != "P80 v1.00" || it.PendingVersion != "" {
				t.Fatalf("after boot BIOS = %+v", it)
			}
			if n := b.Flashes("BIOS"); n != 1 {
				t.Fatalf("BIOS flashed %d times", n)
			}
		})
	}
}

func TestWaitTaskGoneReadsInventory(t *testing.T) {
	art := artifactServer(t, map[string][]byte{"/gpu.fw": fwPackage("HGX_FW_GPU_SXM_*", "97.00.01", []byte("gpu"))})
	for _, shape := range []vbmc.TaskShape{vbmc.ShapeMonitor, vbmc.ShapeTaskLocation} {
		b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{TaskShape: shape, TaskGoneAfterCompletion: true}), nil)
		c := connect(t, url, 5*time.Second)
		ctx := waitCtx(t)
		job, err := c.SimpleUpdate(ctx, art+"/gpu.fw", nil, "HTTP")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.WaitTask(ctx, job, 30*time.Millisecond)
		if err != nil || res.State != TaskGone {
			t.Fatalf("%q: WaitTask = %+v, %v; want TaskGone", shape, res, err)
		}
		i := slices.IndexFunc(res.Inventory, func(f FirmwareItem) bool { return f.ID == "HGX_FW_GPU_SXM_4" })
		if i < 0 || res.Inventory[i].PendingVersion != "97.00.01" {
			t.Fatalf("%q: inventory with the result: %+v", shape, res.Inventory)
		}
		if b.Flashes("HGX_FW_GPU_SXM_4") != 1 {
			t.Fatalf("%q: flashes = %d", shape, b.Flashes("HGX_FW_GPU_SXM_4"))
		}
	}
}

func TestTaskFailureIsAnError(t *testing.T) {
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{}), nil)
	art := artifactServer(t, map[string][]byte{"/bmc.fw": fwPackage("BMC", "2.0", nil)})
	c := connect(t, url, 5*time.Second)
	ctx := waitCtx(t)
	b.FailNextTask("image signature rejected")
	job, err := c.SimpleUpdate(ctx, art+"/bmc.fw", []string{"BMC"}, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.WaitTask(ctx, job, 30*time.Millisecond)
	if !errors.Is(err, ErrTaskFailed) || res == nil || res.State != "Exception" || !strings.Contains(err.Error(), "image signature rejected") {
		t.Fatalf("failed task: %+v, %v", res, err)
	}
	if b.Flashes("BMC") != 0 {
		t.Fatal("a failed task flashed")
	}
}

// The answer is lost after the BMC accepted: the driver says so, finds the
// task instead of sending again, and the component is flashed once.
func TestAcceptThenTimeoutRecoversWithoutSecondFlash(t *testing.T) {
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{}), nil)
	art := artifactServer(t, map[string][]byte{"/gpu.fw": fwPackage("HGX_FW_GPU_SXM_1", "97.00.02", []byte("g"))})
	c := connect(t, url, 400*time.Millisecond)
	ctx := waitCtx(t)
	b.AcceptThenTimeout(time.Minute)
	_, err := c.SimpleUpdate(ctx, art+"/gpu.fw", []string{"HGX_FW_GPU_SXM_1"}, "")
	var ue *UnknownOutcomeError
	if !errors.Is(err, ErrUnknownOutcome) || !errors.As(err, &ue) {
		t.Fatalf("SimpleUpdate with the answer withheld: %v, want ErrUnknownOutcome", err)
	}
	job, err := c.RecoverJob(ctx, ue)
	if err != nil || job == nil {
		t.Fatalf("RecoverJob = %+v, %v; want the task the lost request created", job, err)
	}
	if _, err := c.WaitTask(ctx, job, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.PowerOn(ctx); err != nil { // HGX firmware activates on the host boot
		t.Fatal(err)
	}
	for inventoryItem(t, c, "HGX_FW_GPU_SXM_1").Version != "97.00.02" {
		select {
		case <-ctx.Done():
			t.Fatal("the new version never showed")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n := b.Flashes("HGX_FW_GPU_SXM_1"); n != 1 {
		t.Fatalf("flashes = %d, want exactly 1", n)
	}
}

// A request that reached the BMC but was never processed (the BMC hung
// before acting) leaves no task: RecoverJob says so, and sending again is
// safe and flashes once.
func TestUnknownOutcomeWithNoTaskIsRetryable(t *testing.T) {
	var hung atomic.Bool
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "SimpleUpdate") && hung.CompareAndSwap(false, true) {
				// Drop the request unanswered. (Reading the body lets the
				// server notice the client hang up.)
				io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{}), wrap)
	art := artifactServer(t, map[string][]byte{"/bmc.fw": fwPackage("BMC", "2.1", nil)})
	c := connect(t, url, 300*time.Millisecond)
	ctx := waitCtx(t)
	_, err := c.SimpleUpdate(ctx, art+"/bmc.fw", nil, "")
	var ue *UnknownOutcomeError
	if !errors.As(err, &ue) || !ue.TasksListed {
		t.Fatalf("hung POST: %v, want *UnknownOutcomeError with the tasks listed before", err)
	}
	job, err := c.RecoverJob(ctx, ue)
	if err != nil || job != nil {
		t.Fatalf("RecoverJob after a request the BMC never processed: %+v %v, want none", job, err)
	}
	job, err = c.SimpleUpdate(ctx, art+"/bmc.fw", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTask(ctx, job, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if b.Flashes("BMC") != 1 {
		t.Fatalf("flashes = %d, want 1", b.Flashes("BMC"))
	}
}

func TestCutTCPIsUnknownOutcome(t *testing.T) {
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{TaskShape: vbmc.ShapeTaskLocation}), nil)
	art := artifactServer(t, map[string][]byte{"/bmc.fw": fwPackage("BMC", "2.2", nil)})
	c := connect(t, url, 5*time.Second)
	ctx := waitCtx(t)
	b.CutTCP()
	_, err := c.SimpleUpdate(ctx, art+"/bmc.fw", []string{"BMC"}, "")
	var ue *UnknownOutcomeError
	if !errors.As(err, &ue) {
		t.Fatalf("cut connection: %v, want *UnknownOutcomeError", err)
	}
	job, err := c.RecoverJob(ctx, ue)
	if err != nil || job == nil {
		t.Fatalf("RecoverJob = %v %v", job, err)
	}
	if res, err := c.WaitTask(ctx, job, 30*time.Millisecond); err != nil || res.State != "Completed" {
		t.Fatalf("WaitTask = %+v %v", res, err)
	}
	if b.Flashes("BMC") != 1 {
		t.Fatalf("flashes = %d", b.Flashes("BMC"))
	}
}

// patternReader generates n deterministic bytes without holding them.
type patternReader struct{ n, off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(b)), p.n-p.off))
	for i := range b[:k] {
		b[i] = byte((p.off + int64(i)) * 31 >> 3)
	}
	p.off += int64(k)
	return k, nil
}

func TestMultipartPushStreams64MiB(t *testing.T) {
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{}), nil)
	c := connect(t, url, 5*time.Second)
	ctx := waitCtx(t)
	const payload = 64 << 20
	sum := sha256.New()
	io.Copy(sum, &patternReader{n: payload})
	head := vbmc.PackageHeader{Component: "HGX_FW_NVSwitch_*", Version: "96.10.70.00.01", Size: payload, SHA256: hex.EncodeToString(sum.Sum(nil))}.Line()
	size := int64(len(head)) + payload

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	job, err := c.MultipartPush(ctx, io.MultiReader(bytes.NewReader(head), &patternReader{n: payload}), size, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Client and BMC both run here: together they must stay far below the
	// image size, or one of them buffered it.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("pushing %d MiB allocated %d KiB (client and BMC together)", size>>20, alloc>>10)
	if alloc > 16<<20 {
		t.Fatalf("pushing 64 MiB allocated %d MiB: the image was buffered", alloc>>20)
	}
	if res, err := c.WaitTask(ctx, job, 30*time.Millisecond); err != nil || res.State != "Completed" {
		t.Fatalf("WaitTask = %+v %v", res, err)
	}
	for i := range 4 {
		id := "HGX_FW_NVSwitch_" + string(rune('0'+i))
		if b.Flashes(id) != 1 {
			t.Errorf("%s flashes = %d", id, b.Flashes(id))
		}
	}
	// A reader that ends early is a definite failure, not an unknown outcome.
	_, err = c.MultipartPush(ctx, bytes.NewReader(head), size, []string{"HGX_FW_NVSwitch_0"})
	if err == nil || errors.Is(err, ErrUnknownOutcome) || !strings.Contains(err.Error(), "image ended after") {
		t.Fatalf("short image: %v", err)
	}
}

func TestResetManagerWaitBMC503(t *testing.T) {
	b, _, _, url := bmcServer(t, fastOOB(vbmc.Config{}), nil)
	art := artifactServer(t, map[string][]byte{"/bmc.fw": fwPackage("BMC", "2.5.0", []byte("bmc"))})
	c := connect(t, url, 2*time.Second)
	ctx := waitCtx(t)
	job, err := c.SimpleUpdate(ctx, art+"/bmc.fw", []string{"BMC"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTask(ctx, job, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetManager(ctx, "GracefulRestart"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBMC(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if it := inventoryItem(t, c, "BMC"); it.Version != "2.5.0" {
		t.Fatalf("BMC after reset = %+v", it)
	}
	if b.BMCResets() != 1 || b.SessionCount() != 1 {
		t.Fatalf("resets %d sessions %d; want 1 reset and one fresh session", b.BMCResets(), b.SessionCount())
	}
	c.Close(ctx)
	if b.SessionCount() != 0 {
		t.Fatalf("sessions after Close = %d", b.SessionCount())
	}
}

func TestWaitBMCConnectionRefusedAndSlowReturn(t *testing.T) {
	m := vbmc.NewFakeMachine()
	cfg := fastOOB(vbmc.Config{Name: "refuse", ResetRefuse: true, Logger: testLogger(t)})
	b, err := vbmc.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	// TLS with a pinned certificate: the BMC must come back with the same one.
	srv, err := vbmc.Listen("127.0.0.1:0", b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	testCerts.Store(srv.URL, srv.Fingerprint())
	c := connect(t, srv.URL, time.Second)
	ctx := waitCtx(t)
	b.SetSlowReturn(1500 * time.Millisecond)
	if err := c.ResetManager(ctx, "ForceRestart"); err != nil {
		t.Fatal(err)
	}
	// Its own budget: too short for a slow BMC is an error naming the wait.
	err = c.WaitBMC(ctx, 700*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not back within") {
		t.Fatalf("short budget: %v", err)
	}
	if err := c.WaitBMC(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ps, err := c.PowerState(ctx); err != nil || ps != "Off" {
		t.Fatalf("after the BMC came back: %q %v", ps, err)
	}
}

func TestSessionLimitRespectedByLogout(t *testing.T) {
	_, _, _, url := bmcServer(t, vbmc.Config{MaxSessions: 1}, nil)
	for range 3 { // each client logs out, so the next one fits
		c := connect(t, url, 5*time.Second)
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlanBios(t *testing.T) {
	cur := map[string]any{"ProcTurboMode": "Enabled", "ProcCoreDisable": float64(0), "BootMode": "Uefi"}
	want := map[string]any{"ProcTurboMode": "Disabled", "ProcCoreDisable": 0, "BootMode": "Uefi", "SriovGlobalEnable": "Enabled"}
	changes, matches := PlanBios(cur, want)
	if len(changes) != 2 || changes["ProcTurboMode"] != "Disabled" || changes["SriovGlobalEnable"] != "Enabled" {
		t.Errorf("changes = %v", changes)
	}
	if !slices.Equal(matches, []string{"BootMode", "ProcCoreDisable"}) {
		t.Errorf("matches = %v", matches)
	}
	if c, _ := PlanBios(map[string]any{"X": "1"}, map[string]any{"X": 1}); len(c) != 1 {
		t.Error(`"1" and 1 compared equal`)
	}
}

func TestBiosSettingsOnReset(t *testing.T) {
	b, _, rec, url := bmcServer(t, vbmc.Config{RequireIfMatch: true}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := waitCtx(t)
	cur, err := c.BiosAttributes(ctx)
	if err != nil || cur["ProcTurboMode"] != "Enabled" {
		t.Fatalf("BiosAttributes = %v %v", cur, err)
	}
	changes, matches := PlanBios(cur, map[string]any{"ProcTurboMode": "Disabled", "BootMode": "Uefi", "ProcCoreDisable": 4})
	if len(matches) != 1 {
		t.Fatalf("matches = %v", matches)
	}
	if err := c.SetBiosAttributes(ctx, changes); err != nil {
		t.Fatal(err)
	}
	p := rec.Patches()
	if len(p) != 1 || p[0].ifMatch == "" || strings.Contains(p[0].body, "BootMode") || !strings.Contains(p[0].body, `"ApplyTime":"OnReset"`) {
		t.Fatalf("PATCHes = %+v, want one with If-Match, OnReset and only the changes", p)
	}
	pending, err := c.PendingBiosAttributes(ctx)
	if err != nil || len(pending) != 2 || pending["ProcCoreDisable"] != float64(4) {
		t.Fatalf("pending = %v %v", pending, err)
	}
	if err := c.SetBiosAttributes(ctx, map[string]any{"ProcTurboMode": "Off"}); err == nil || !strings.Contains(err.Error(), "ProcTurboMode") {
		t.Fatalf("bad value: %v, want a refusal naming the attribute", err)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.BiosAttributes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := PlanBios(after, changes); len(left) != 0 {
		t.Fatalf("after reboot still differing: %v", left)
	}
	if pending, _ := c.PendingBiosAttributes(ctx); len(pending) != 0 || b.BiosApplied() != 2 {
		t.Fatalf("pending after boot %v, applied %d", pending, b.BiosApplied())
	}
}

func TestBiosPatchLostAnswer(t *testing.T) {
	b, _, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 300*time.Millisecond)
	ctx := waitCtx(t)
	b.AcceptThenTimeout(time.Minute)
	err := c.SetBiosAttributes(ctx, map[string]any{"NicBoot2": "NetworkBoot"})
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("withheld PATCH answer: %v", err)
	}
	// Poll the target state before retrying: it took.
	pending, err := c.PendingBiosAttributes(ctx)
	if err != nil || pending["NicBoot2"] != "NetworkBoot" {
		t.Fatalf("pending = %v %v", pending, err)
	}
}
