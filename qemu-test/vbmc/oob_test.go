package vbmc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pkg builds a test firmware package with a checked payload.
func pkg(component, version string, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	h := PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	return append(h.Line(), payload...)
}

// artifacts serves firmware packages by path, like the coordinator's
// artifact server.
func artifacts(t *testing.T, files map[string][]byte) string {
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

func oobConfig() Config {
	return Config{Name: "n1", TaskDuration: 100 * time.Millisecond, ResetDuration: 200 * time.Millisecond}
}

// pollTask follows a task URI until it is done and returns its body.
func pollTask(t *testing.T, b *BMC, uri string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rec := do(t, b, "GET", uri, "", "")
		if rec.Code == http.StatusOK {
			body := decode(t, rec)
			if body["TaskState"] != "Running" {
				return body
			}
		} else if rec.Code != http.StatusAccepted {
			t.Fatalf("GET %s: %d %s", uri, rec.Code, rec.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task %s still running after 5s", uri)
	return nil
}

func TestDefaultInventoryAndConfig(t *testing.T) {
	b, _ := newFakeBMC(t, oobConfig())
	inv := decode(t, do(t, b, "GET", "/redfish/v1/UpdateService/FirmwareInventory", "", ""))
	members := fmt.Sprint(inv["Members"])
	for _, id := range []string{"/BMC]", "/BIOS]", "HGX_FW_GPU_SXM_8", "HGX_FW_NVSwitch_3", "HGX_FW_ERoT_GPU_SXM_1"} {
		if !strings.Contains(members, id) {
			t.Errorf("inventory lacks %s: %s", id, members)
		}
	}
	gpu := decode(t, do(t, b, "GET", "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_3", "", ""))
	if gpu["Version"] != "96.00.A5.00.01" || gpu["Updateable"] != true || gpu["SoftwareId"] == "" {
		t.Errorf("GPU member = %v", gpu)
	}
	_, err := New(Config{Firmware: []FirmwareSpec{{ID: "X", Version: "1", Kind: "nic"}}}, NewFakeMachine())
	if err == nil || !strings.Contains(err.Error(), `Firmware[0] (X).Kind "nic"`) {
		t.Errorf("bad Kind: %v", err)
	}
	_, err = New(Config{TransferProtocols: []string{"TFTP"}}, NewFakeMachine())
	if err == nil || !strings.Contains(err.Error(), "TFTP") {
		t.Errorf("unimplemented protocol: %v", err)
	}
	us := decode(t, do(t, b, "GET", "/redfish/v1/UpdateService", "", ""))
	if us["MultipartHttpPushUri"] != multipartURL || us["HttpPushUri"] != nil {
		t.Errorf("UpdateService = %v", us)
	}
}

func TestSimpleUpdateMonitorStagesBIOSUntilBoot(t *testing.T) {
	cfg := oobConfig()
	b, m := newFakeBMC(t, cfg)
	art := artifacts(t, map[string][]byte{"/bios.fw": pkg("BIOS", "P79 v2.00", []byte("bios payload"))})
	rec := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+`/bios.fw","TransferProtocol":"HTTP","Targets":["/redfish/v1/UpdateService/FirmwareInventory/BIOS"]}`)
	loc := rec.Header().Get("Location")
	if rec.Code != http.StatusAccepted || !strings.HasPrefix(loc, monitorsURL+"/") {
		t.Fatalf("SimpleUpdate: %d Location %q %s", rec.Code, loc, rec.Body)
	}
	if first := do(t, b, "GET", loc, "", ""); first.Code != http.StatusAccepted {
		t.Fatalf("monitor right after accept: %d, want 202 while running", first.Code)
	}
	done := pollTask(t, b, loc)
	if done["TaskState"] != "Completed" || done["PercentComplete"] != float64(100) {
		t.Fatalf("task = %v", done)
	}
	if again := do(t, b, "GET", loc, "", ""); again.Code != http.StatusNotFound {
		t.Fatalf("monitor after the completed read: %d, want 404", again.Code)
	}
	// Staged: the inventory still reports the running BIOS, plus the pending one.
	bios := decode(t, do(t, b, "GET", inventoryURL+"/BIOS", "", ""))
	if bios["Version"] != "P79 v1.45" || !strings.Contains(fmt.Sprint(bios["Oem"]), "PendingVersion:P79 v2.00") {
		t.Fatalf("staged BIOS member = %v", bios)
	}
	if b.Flashes("BIOS") != 1 || b.Flashes("BMC") != 0 {
		t.Fatalf("flashes BIOS=%d BMC=%d", b.Flashes("BIOS"), b.Flashes("BMC"))
	}
	do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	if a, p, _ := b.FirmwareVersion("BIOS"); a != "P79 v2.00" || p != "" {
		t.Fatalf("after boot: active %q pending %q", a, p)
	}
	if s := decode(t, do(t, b, "GET", sys, "", "")); s["BiosVersion"] != "P79 v2.00" {
		t.Errorf("system BiosVersion = %v", s["BiosVersion"])
	}
	if len(m.Boots()) != 1 {
		t.Fatalf("boots = %v", m.Boots())
	}
}

func TestSimpleUpdateRefusals(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", TaskDuration: 50 * time.Millisecond, TransferProtocols: []string{"HTTPS"}})
	for _, tc := range []struct{ body, want string }{
		{`{"ImageURI":"http://h/x.fw"}`, "TransferProtocol HTTP is not supported"},
		{`{"ImageURI":"h/x.fw"}`, "has no scheme"},
		{`{"ImageURI":"https://h/x.fw","TransferProtocol":"HTTP"}`, "disagrees"},
		{`{"ImageURI":"https://h/x.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/NIC"]}`, "Targets"},
		{`{"ImageURI":"https://h/x.fw","Force":true}`, "ActionParameterUnknown"},
		{`{"TransferProtocol":"HTTPS"}`, "ActionParameterMissing"},
	} {
		rec := do(t, b, "POST", simpleUpdateURL, "", tc.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.body, rec.Code, rec.Body, tc.want)
		}
	}
	if len(b.Tasks()) != 0 {
		t.Fatalf("refused requests created tasks: %v", b.Tasks())
	}
}

func TestUpdateTaskFailures(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", TaskDuration: 50 * time.Millisecond, TaskShape: ShapeTaskLocation})
	good := pkg("HGX_FW_GPU_SXM_*", "97.00.01", []byte("gpu"))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	art := artifacts(t, map[string][]byte{"/gpu.fw": good, "/corrupt.fw": corrupt, "/junk.fw": []byte("not a package\n")})
	cases := []struct{ uri, targets, fail, want string }{
		{"/corrupt.fw", "", "", "sha256"},
		{"/junk.fw", "", "", "header line"},
		{"/missing.fw", "", "", "404"},
		{"/gpu.fw", `"/redfish/v1/UpdateService/FirmwareInventory/BIOS"`, "", "does not apply to target BIOS"},
		{"/gpu.fw", "", "flash write error", "flash write error"},
	}
	for _, tc := range cases {
		if tc.fail != "" {
			b.FailNextTask(tc.fail)
		}
		rec := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+tc.uri+`","Targets":[`+tc.targets+`]}`)
		loc := rec.Header().Get("Location")
		if rec.Code != http.StatusAccepted || !strings.HasPrefix(loc, tasksURL+"/") {
			t.Fatalf("%s: %d Location %q", tc.uri, rec.Code, loc)
		}
		done := pollTask(t, b, loc)
		if done["TaskState"] != "Exception" || !strings.Contains(fmt.Sprint(done["Messages"]), tc.want) {
			t.Errorf("%s: task %v, want Exception mentioning %q", tc.uri, done, tc.want)
		}
	}
	if n := b.Flashes("HGX_FW_GPU_SXM_1"); n != 0 {
		t.Fatalf("failed tasks flashed the GPU %d times", n)
	}
	// A bundle with a prefix flashes every matching member.
	rec := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+`/gpu.fw"}`)
	pollTask(t, b, rec.Header().Get("Location"))
	for i := 1; i <= 8; i++ {
		if n := b.Flashes(fmt.Sprintf("HGX_FW_GPU_SXM_%d", i)); n != 1 {
			t.Errorf("GPU %d flashes = %d", i, n)
		}
	}
	if b.Flashes("HGX_FW_ERoT_GPU_SXM_1") != 0 {
		t.Error("the GPU bundle flashed an ERoT")
	}
}

func TestMultipartPushTaskInBody(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", TaskDuration: 50 * time.Millisecond, TaskShape: ShapeTaskBody})
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	pw, _ := mw.CreateFormField("UpdateParameters")
	io.WriteString(pw, `{"Targets":["/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_NVSwitch_2"],"@Redfish.OperationApplyTime":"Immediate"}`)
	fw, _ := mw.CreateFormFile("UpdateFile", "nvsw.fw")
	fw.Write(pkg("HGX_FW_NVSwitch_2", "96.10.60.00.01", bytes.Repeat([]byte{0xA5}, 1<<20)))
	mw.Close()
	req := httptest.NewRequest("POST", multipartURL, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.SetBasicAuth("admin", "password")
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted || rec.Header().Get("Location") != "" {
		t.Fatalf("push: %d Location %q %s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	task := decode(t, rec)
	if task["TaskState"] != "Running" {
		t.Fatalf("task in body = %v", task)
	}
	done := pollTask(t, b, task["@odata.id"].(string))
	if done["TaskState"] != "Completed" || b.Flashes("HGX_FW_NVSwitch_2") != 1 || b.Flashes("HGX_FW_NVSwitch_1") != 0 {
		t.Fatalf("task %v, flashes %d", done, b.Flashes("HGX_FW_NVSwitch_2"))
	}
	// Without the UpdateFile part the upload is refused.
	body.Reset()
	mw = multipart.NewWriter(&body)
	pw, _ = mw.CreateFormField("UpdateParameters")
	io.WriteString(pw, `{"Targets":[]}`)
	mw.Close()
	req = httptest.NewRequest("POST", multipartURL, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.SetBasicAuth("admin", "password")
	rec = httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "UpdateFile present: false") {
		t.Fatalf("push without a file: %d %s", rec.Code, rec.Body)
	}
}

func TestTaskGoneAfterCompletion(t *testing.T) {
	cfg := oobConfig()
	cfg.TaskGoneAfterCompletion = true
	b, _ := newFakeBMC(t, cfg)
	art := artifacts(t, map[string][]byte{"/bmc.fw": pkg("BMC", "2.0.0", nil)})
	rec := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+`/bmc.fw"}`)
	loc := rec.Header().Get("Location")
	waitFor(t, 5*time.Second, "flash", func() bool { return b.Flashes("BMC") == 1 })
	if r := do(t, b, "GET", loc, "", ""); r.Code != http.StatusNotFound {
		t.Fatalf("monitor of a purged task: %d", r.Code)
	}
	if r := do(t, b, "GET", tasksURL+"/1", "", ""); r.Code != http.StatusNotFound {
		t.Fatalf("purged task: %d", r.Code)
	}
}

func TestManagerResetActivatesBMCFirmware(t *testing.T) {
	b, _ := newFakeBMC(t, oobConfig())
	art := artifacts(t, map[string][]byte{"/bmc.fw": pkg("BMC", "2.0.0", []byte("bmc"))})
	rec := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+`/bmc.fw"}`)
	pollTask(t, b, rec.Header().Get("Location"))
	do(t, b, "POST", "/redfish/v1/SessionService/Sessions", "-", `{"UserName":"admin","Password":"password"}`)
	if b.SessionCount() != 1 {
		t.Fatalf("sessions = %d", b.SessionCount())
	}
	if r := do(t, b, "POST", managerURL+"/Actions/Manager.Reset", "", `{"ResetType":"Nmi"}`); r.Code != http.StatusBadRequest {
		t.Fatalf("Nmi manager reset: %d", r.Code)
	}
	if r := do(t, b, "POST", managerURL+"/Actions/Manager.Reset", "", `{"ResetType":"GracefulRestart"}`); r.Code != http.StatusNoContent {
		t.Fatalf("manager reset: %d %s", r.Code, r.Body)
	}
	if r := do(t, b, "GET", "/redfish/v1/", "-", ""); r.Code != http.StatusServiceUnavailable {
		t.Fatalf("service root during reset: %d, want 503", r.Code)
	}
	if b.SessionCount() != 0 || b.BMCResets() != 1 {
		t.Fatalf("during reset: sessions %d resets %d", b.SessionCount(), b.BMCResets())
	}
	waitFor(t, 5*time.Second, "BMC back", func() bool { return !b.Resetting() })
	mgr := decode(t, do(t, b, "GET", managerURL, "", ""))
	if mgr["FirmwareVersion"] != "2.0.0" {
		t.Fatalf("manager FirmwareVersion = %v", mgr["FirmwareVersion"])
	}
	if a, _, _ := b.FirmwareVersion("BMC"); a != "2.0.0" {
		t.Fatalf("BMC active = %s", a)
	}
}

func TestResetRefusesConnectionsAndSlowReturn(t *testing.T) {
	cfg := oobConfig()
	cfg.ResetRefuse = true
	cfg.Logger = testLogger(t)
	b, err := New(cfg, NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", b, false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	b.SetSlowReturn(700 * time.Millisecond)
	get := func() error {
		resp, err := http.Get(srv.URL + "/redfish/v1/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	req, _ := http.NewRequest("POST", srv.URL+managerURL+"/Actions/Manager.Reset", strings.NewReader(`{"ResetType":"ForceRestart"}`))
	req.SetBasicAuth("admin", "password")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %v %v", resp, err)
	}
	resp.Body.Close()
	time.Sleep(300 * time.Millisecond)
	if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("during reset: %v, want connection refused", err)
	}
	start := time.Now()
	waitFor(t, 5*time.Second, "BMC back", func() bool { return get() == nil })
	if time.Since(start) < 250*time.Millisecond {
		t.Errorf("came back after %v; SlowReturn asked for 700ms in all", time.Since(start))
	}
}

func TestBiosSettingsStagedUntilBoot(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1", RequireIfMatch: true})
	bios := decode(t, do(t, b, "GET", sys+"/Bios", "", ""))
	st := bios["@Redfish.Settings"].(map[string]any)
	if st["SettingsObject"].(map[string]any)["@odata.id"] != sys+"/Bios/Settings" {
		t.Fatalf("@Redfish.Settings = %v", st)
	}
	if r := do(t, b, "PATCH", sys+"/Bios", "", `{"Attributes":{"ProcTurboMode":"Disabled"}}`); r.Code != http.StatusMethodNotAllowed {
		t.Fatalf("PATCH current Bios: %d, want 405", r.Code)
	}
	patch := func(body, ifMatch string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("PATCH", sys+"/Bios/Settings", strings.NewReader(body))
		req.SetBasicAuth("admin", "password")
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, req)
		return rec
	}
	settings := do(t, b, "GET", sys+"/Bios/Settings", "", "")
	etag := settings.Header().Get("ETag")
	for _, tc := range []struct{ body, want string }{
		{`{"Attributes":{"TurboBoost":"On"}}`, "TurboBoost is not in the BIOS attribute registry"},
		{`{"Attributes":{"ProcTurboMode":"Off"}}`, "acceptable values [Enabled Disabled]"},
		{`{"Attributes":{"ProcCoreDisable":"2"}}`, "not an integer"},
		{`{"Attributes":{"ProcTurboMode":"Disabled"},"@Redfish.SettingsApplyTime":{"ApplyTime":"Immediate"}}`, "OnReset"},
	} {
		if r := patch(tc.body, etag); r.Code != http.StatusBadRequest || !strings.Contains(r.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.body, r.Code, r.Body, tc.want)
		}
	}
	good := `{"Attributes":{"ProcTurboMode":"Disabled","ProcCoreDisable":2},"@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"}}`
	if r := patch(good, ""); r.Code != http.StatusPreconditionRequired {
		t.Fatalf("no If-Match: %d", r.Code)
	}
	if r := patch(good, `"stale"`); r.Code != http.StatusPreconditionFailed {
		t.Fatalf("stale If-Match: %d", r.Code)
	}
	if r := patch(`{"@odata.type":"#Bios.v1_1_0.Bios"}`, etag); r.Code != http.StatusBadRequest || !strings.Contains(r.Body.String(), "Attributes is missing") {
		t.Errorf("PATCH without Attributes: %d %s, want 400", r.Code, r.Body)
	}
	if r := patch(`{"Attributes":{}}`, etag); r.Code != http.StatusOK || r.Header().Get("ETag") != etag || len(b.StagedBiosAttributes()) != 0 {
		t.Fatalf("PATCH with empty Attributes: %d %s (ETag %s), want 200, nothing staged, ETag unchanged", r.Code, r.Body, r.Header().Get("ETag"))
	}
	if r := patch(good, etag); r.Code != http.StatusOK || r.Header().Get("ETag") == etag {
		t.Fatalf("good PATCH: %d %s", r.Code, r.Body)
	}
	if s := b.StagedBiosAttributes(); len(s) != 2 || s["ProcTurboMode"] != "Disabled" {
		t.Fatalf("staged = %v", s)
	}
	if b.BiosAttributes()["ProcTurboMode"] != "Enabled" {
		t.Fatal("a staged setting took effect before the boot")
	}
	do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	m.GuestReset()
	waitFor(t, 5*time.Second, "reboot", func() bool { return len(b.History()) == 2 })
	cur := b.BiosAttributes()
	if cur["ProcTurboMode"] != "Disabled" || cur["ProcCoreDisable"] != float64(2) || len(b.StagedBiosAttributes()) != 0 || b.BiosApplied() != 2 {
		t.Fatalf("after boot: %v staged %v applied %d", cur, b.StagedBiosAttributes(), b.BiosApplied())
	}
}

func TestAcceptThenTimeoutStillUpdates(t *testing.T) {
	b, _ := newFakeBMC(t, oobConfig())
	art := artifacts(t, map[string][]byte{"/gpu.fw": pkg("HGX_FW_GPU_SXM_1", "97.0", nil)})
	b.AcceptThenTimeout(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest("POST", simpleUpdateURL, strings.NewReader(`{"ImageURI":"`+art+`/gpu.fw"}`)).WithContext(ctx)
	req.SetBasicAuth("admin", "password")
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if rec.Body.Len() != 0 || rec.Header().Get("Location") != "" {
		t.Fatalf("the answer was not withheld: %d %q", rec.Code, rec.Body)
	}
	waitFor(t, 5*time.Second, "the accepted update to flash", func() bool { return b.Flashes("HGX_FW_GPU_SXM_1") == 1 })
	// The fault is one-shot.
	if r := do(t, b, "POST", simpleUpdateURL, "", `{"ImageURI":"`+art+`/gpu.fw"}`); r.Code != http.StatusAccepted {
		t.Fatalf("next update: %d", r.Code)
	}
}

func TestCutTCPAfterAccept(t *testing.T) {
	b, _ := newFakeBMC(t, oobConfig())
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	art := artifacts(t, map[string][]byte{"/bmc.fw": pkg("BMC", "3.0", nil)})
	b.CutTCP()
	req, _ := http.NewRequest("POST", srv.URL+simpleUpdateURL, strings.NewReader(`{"ImageURI":"`+art+`/bmc.fw"}`))
	req.SetBasicAuth("admin", "password")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("cut connection gave a response: %d", resp.StatusCode)
	}
	waitFor(t, 5*time.Second, "the accepted update to flash", func() bool { return b.Flashes("BMC") == 1 })
}

func TestSessionLimit(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", MaxSessions: 1})
	login := func() int {
		return do(t, b, "POST", "/redfish/v1/SessionService/Sessions", "-", `{"UserName":"admin","Password":"password"}`).Code
	}
	if c := login(); c != http.StatusCreated {
		t.Fatalf("first login: %d", c)
	}
	if c := login(); c != http.StatusServiceUnavailable {
		t.Fatalf("second login over the limit: %d, want 503", c)
	}
}

func TestReadPackage(t *testing.T) {
	h, n, err := readPackage(bytes.NewReader(pkg("BMC", "1.2.3", []byte("abc"))))
	if err != nil || h.Component != "BMC" || h.Version != "1.2.3" || n != 3 {
		t.Fatalf("good package: %+v %d %v", h, n, err)
	}
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{bytes.Repeat([]byte("x"), 5000), "no header line within the first 4096 bytes"},
		{[]byte(`{"component":"BMC"}` + "\n"), "component and version are required"},
		{[]byte(`{"component":"BMC","version":"1","vendor":"x"}` + "\n"), "unknown field"},
		{[]byte(`{"component":"BMC","version":"1","size":10}` + "\nabc"), "payload is 3 bytes, header says 10"},
		{[]byte(`{"component":"BMC"`), "reading header line"},
	} {
		if _, _, err := readPackage(bytes.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in[:min(len(tc.in), 40)], err, tc.want)
		}
	}
	if !(PackageHeader{Component: "HGX_FW_GPU_*"}).Matches("HGX_FW_GPU_SXM_1") || (PackageHeader{Component: "BMC"}).Matches("BMC2") {
		t.Error("Matches")
	}
}
