package vbmc

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// do sends one request through the handler with Basic auth (unless token
// is given, or token is "-" for none).
func do(t *testing.T, b *BMC, method, path, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	switch token {
	case "":
		req.SetBasicAuth("admin", "password")
	case "-":
	default:
		req.Header.Set("X-Auth-Token", token)
	}
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	return rec
}

func newFakeBMC(t *testing.T, cfg Config) (*BMC, *FakeMachine) {
	t.Helper()
	m := NewFakeMachine()
	cfg.Logger = testLogger(t)
	b, err := New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b, m
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	return m
}

const sys = "/redfish/v1/Systems/437XR1138R2"

func TestServesMockupWithLiveSystem(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", Serial: "SN-1", MAC: "52:54:00:00:00:01"})
	if rec := do(t, b, "GET", "/redfish/v1/", "-", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), "ServiceRoot") {
		t.Fatalf("service root without auth: %d", rec.Code)
	}
	if rec := do(t, b, "GET", "/redfish/v1/UpdateService/FirmwareInventory/BIOS", "-", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("firmware inventory without auth: %d, want 401", rec.Code)
	}
	rec := do(t, b, "GET", sys, "", "")
	if rec.Code != 200 {
		t.Fatalf("GET system: %d %s", rec.Code, rec.Body)
	}
	s := decode(t, rec)
	if s["PowerState"] != "Off" || s["SerialNumber"] != "SN-1" || s["Manufacturer"] != "CURE" {
		t.Errorf("system = PowerState %v Serial %v Manufacturer %v", s["PowerState"], s["SerialNumber"], s["Manufacturer"])
	}
	if rec.Header().Get("ETag") == "" || rec.Header().Get("ETag") != s["@odata.etag"] {
		t.Errorf("ETag header %q vs @odata.etag %v", rec.Header().Get("ETag"), s["@odata.etag"])
	}
	resets := s["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"].([]any)
	for _, r := range resets {
		if r == "Nmi" {
			t.Error("Nmi advertised but not implemented")
		}
	}
	nic := decode(t, do(t, b, "GET", sys+"/EthernetInterfaces/12446A3B0411", "", ""))
	if nic["MACAddress"] != "52:54:00:00:00:01" {
		t.Errorf("NIC MAC = %v", nic["MACAddress"])
	}
}

func TestSessions(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1"})
	rec := do(t, b, "POST", "/redfish/v1/SessionService/Sessions", "-", `{"UserName":"admin","Password":"wrong"}`)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("login with wrong password: %d", rec.Code)
	}
	rec = do(t, b, "POST", "/redfish/v1/SessionService/Sessions", "-", `{"UserName":"admin","Password":"password"}`)
	tok, loc := rec.Header().Get("X-Auth-Token"), rec.Header().Get("Location")
	if rec.Code != http.StatusCreated || tok == "" || !strings.HasPrefix(loc, "/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("login: %d token %q location %q", rec.Code, tok, loc)
	}
	if b.SessionCount() != 1 {
		t.Fatalf("sessions = %d, want 1", b.SessionCount())
	}
	if rec := do(t, b, "GET", sys, tok, ""); rec.Code != 200 {
		t.Fatalf("GET with token: %d", rec.Code)
	}
	if rec := do(t, b, "DELETE", loc, tok, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("logout: %d", rec.Code)
	}
	if b.SessionCount() != 0 {
		t.Fatalf("sessions after logout = %d", b.SessionCount())
	}
	if rec := do(t, b, "GET", sys, tok, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("GET with dead token: %d, want 401", rec.Code)
	}
	b.SetFailAuth(true)
	if rec := do(t, b, "GET", sys, "", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("basic auth with FailAuth: %d, want 401", rec.Code)
	}
}

func TestBootPatchValidationAndETag(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", NoContinuous: true})
	rec := do(t, b, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Continuous"}}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "Base.1.5.0.PropertyValueNotInList") {
		t.Fatalf("Continuous on a Lenovo-style BMC: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, b, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"Cd"}}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("target Cd (not bootable here): %d", rec.Code)
	}
	if rec := do(t, b, "PATCH", sys, "", `{"PowerState":"On"}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "PropertyNotWritable") {
		t.Fatalf("PATCH PowerState: %d %s", rec.Code, rec.Body)
	}
	if len(b.Overrides()) != 0 {
		t.Fatalf("refused PATCHes were recorded: %+v", b.Overrides())
	}
	etag := b.ETag()
	req := httptest.NewRequest("PATCH", sys, strings.NewReader(`{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`))
	req.SetBasicAuth("admin", "password")
	req.Header.Set("If-Match", `"stale"`)
	rec = httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusPreconditionFailed {
		t.Fatalf("stale If-Match: %d, want 412", rec.Code)
	}
	req = httptest.NewRequest("PATCH", sys, strings.NewReader(`{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`))
	req.SetBasicAuth("admin", "password")
	req.Header.Set("If-Match", etag)
	rec = httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("ETag") == etag {
		t.Fatalf("matching If-Match: %d, ETag %q (was %q)", rec.Code, rec.Header().Get("ETag"), etag)
	}
	if o := b.Overrides(); len(o) != 1 || o[0].Target != "Pxe" || o[0].Enabled != "Once" {
		t.Fatalf("overrides = %+v", o)
	}
}

func TestNoBootModeRejectsMode(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1", NoBootMode: true})
	s := decode(t, do(t, b, "GET", sys, "", ""))
	if _, ok := s["Boot"].(map[string]any)["BootSourceOverrideMode"]; ok {
		t.Fatal("NoBootMode BMC exposes BootSourceOverrideMode")
	}
	rec := do(t, b, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideMode":"Legacy"}}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "PropertyUnknown") {
		t.Fatalf("PATCH Mode on a no-Mode BMC: %d %s", rec.Code, rec.Body)
	}
}

func TestOnceIsConsumedContinuousPersists(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1"})
	reset := func(rt string) {
		t.Helper()
		if rec := do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"`+rt+`"}`); rec.Code != http.StatusNoContent {
			t.Fatalf("reset %s: %d %s", rt, rec.Code, rec.Body)
		}
	}
	setOverride(t, b, "Pxe", "Once")
	reset("On")
	if _, en := b.BootOverride(); en != "Disabled" {
		t.Fatalf("Once not consumed by the boot: Enabled=%s", en)
	}
	m.GuestReset() // the guest reboots: default order now
	waitFor(t, 5*time.Second, "reboot after guest reset", func() bool { return len(b.History()) == 2 })
	setOverride(t, b, "Pxe", "Continuous")
	reset("ForceRestart")
	reset("ForceRestart")
	m.GuestPoweroff()
	waitFor(t, 5*time.Second, "power off", func() bool { return b.PowerState() == PowerOff })

	want := []BootRecord{
		{Device: BootPxe, Override: "Once", Reason: "On"},
		{Device: BootHdd, Override: "Disabled", Reason: "guest-reset"},
		{Device: BootPxe, Override: "Continuous", Reason: "ForceRestart"},
		{Device: BootPxe, Override: "Continuous", Reason: "ForceRestart"},
	}
	h := b.History()
	if len(h) != len(want) {
		t.Fatalf("history = %+v", h)
	}
	for i := range want {
		if h[i].Device != want[i].Device || h[i].Override != want[i].Override || h[i].Reason != want[i].Reason {
			t.Errorf("boot %d = %+v, want %+v", i, h[i], want[i])
		}
	}
	if got := m.Boots(); len(got) != 4 || got[1] != BootHdd {
		t.Errorf("machine boots = %v", got)
	}
	if stops := m.Stops(); len(stops) != 2 || !stops[0] {
		t.Errorf("machine stops = %v, want two forced", stops)
	}

	var doc historyDoc
	rec := do(t, b, "GET", "/vbmc/history", "-", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.Boots) != 4 || len(doc.Overrides) != 2 || doc.PowerState != "Off" {
		t.Errorf("/vbmc/history = %s (%v)", rec.Body, err)
	}
}

func TestResetRefusesUnadvertisedType(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1"})
	rec := do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"PowerCycle"}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "ActionParameterValueNotInList") {
		t.Fatalf("PowerCycle (not in the mockup's allowable values): %d %s", rec.Code, rec.Body)
	}
	if len(m.Boots()) != 0 {
		t.Fatal("refused reset touched the machine")
	}
}

func TestFailedStartRestoresOnce(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1"})
	setOverride(t, b, "Pxe", "Once")
	m.StartErr = errors.New("no qemu")
	rec := do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("failed start: %d", rec.Code)
	}
	if _, en := b.BootOverride(); en != "Once" || b.PowerState() != PowerOff || len(b.History()) != 0 {
		t.Fatalf("after failed start: Enabled=%s power=%s history=%d", en, b.PowerState(), len(b.History()))
	}
}

func TestStaleEventIgnored(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1"})
	do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	// An event from boot 0 (long gone) must not power the current boot off.
	m.events <- MachineEvent{Kind: GuestPoweroff, Boot: 0}
	m.GuestReset()
	waitFor(t, 5*time.Second, "reboot", func() bool { return len(b.History()) == 2 })
	if b.PowerState() != PowerOn {
		t.Fatalf("power = %s after a stale poweroff event", b.PowerState())
	}
}

func TestHangNextRequest(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Name: "n1"})
	b.HangNextRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest("GET", "/redfish/v1/", nil).WithContext(ctx)
	start := time.Now()
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, req)
	if time.Since(start) < 150*time.Millisecond {
		t.Fatalf("hung request returned after %v", time.Since(start))
	}
	if rec := do(t, b, "GET", "/redfish/v1/", "-", ""); rec.Code != 200 {
		t.Fatalf("request after the hang: %d", rec.Code)
	}
}

// The BMC boots the machine in the BootSourceOverrideMode in force, which
// persists across boots; modes outside BootModes are refused.
func TestBootModeHonoured(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1", BootModes: []string{"Legacy", "UEFI"}})
	s := decode(t, do(t, b, "GET", sys, "", ""))
	boot := s["Boot"].(map[string]any)
	if boot["BootSourceOverrideMode"] != "Legacy" || len(boot["BootSourceOverrideMode@Redfish.AllowableValues"].([]any)) != 2 {
		t.Fatalf("Boot = %v, want mode Legacy with Legacy and UEFI allowed", boot)
	}
	rec := do(t, b, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"UEFI"}}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("PATCH UEFI: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("power on: %d %s", rec.Code, rec.Body)
	}
	m.GuestReset() // Once consumed: the disk boots next, still in UEFI
	waitFor(t, 5*time.Second, "reboot after guest reset", func() bool { return len(b.History()) == 2 })
	if got := m.Modes(); len(got) != 2 || got[0] != "UEFI" || got[1] != "UEFI" {
		t.Errorf("machine modes = %v, want [UEFI UEFI]", got)
	}
	h := b.History()
	if h[0].Mode != "UEFI" || h[0].Device != BootPxe || h[1].Mode != "UEFI" || h[1].Device != BootHdd {
		t.Errorf("history = %+v", h)
	}
	if o := b.Overrides(); len(o) != 1 || o[0].Mode != "UEFI" {
		t.Errorf("overrides = %+v", o)
	}

	legacyOnly, _ := newFakeBMC(t, Config{Name: "n2"})
	rec = do(t, legacyOnly, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideMode":"UEFI"}}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "PropertyValueNotInList") {
		t.Errorf("UEFI on a Legacy-only BMC: %d %s", rec.Code, rec.Body)
	}
	if _, err := New(Config{Name: "n3", BootModes: []string{"BIOS"}}, NewFakeMachine()); err == nil {
		t.Error("BootModes [BIOS] accepted")
	}
}
