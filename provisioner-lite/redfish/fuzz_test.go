package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// The fuzz targets feed the driver's own parsers what a hostile or broken
// BMC could send, seeded with the DMTF mockup the virtual BMC serves. They
// assert invariants, not just "no panic": every link the driver will follow
// stays on the BMC, states come from the Redfish set, text is bounded and
// clean, and waits end.

const mockupDir = "../../qemu-test/vbmc/mockups/public-rackmount1"

// mockup reads a mockup resource body (rel is the path under /redfish/v1).
func mockup(f *testing.F, rel string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join(mockupDir, rel, "index.json"))
	if err != nil {
		f.Fatalf("seed from the DMTF mockup: %v", err)
	}
	return b
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

const fuzzOrigin = "https://bmc.example:443"

// onBMC fails unless uri, appended to the endpoint as the driver and gofish
// do, is a request to the BMC itself.
func onBMC(t *testing.T, what, uri string) {
	t.Helper()
	if uri == "" {
		return
	}
	u, err := url.Parse(fuzzOrigin + uri)
	if err != nil || u.Scheme != "https" || u.Host != "bmc.example:443" || u.User != nil || !strings.HasPrefix(uri, "/") {
		t.Fatalf("%s %q leaves the BMC: %s + it parses as %#v (%v)", what, uri, fuzzOrigin, u, err)
	}
	if again, err := bmcPath(uri); err != nil || again != uri {
		t.Fatalf("%s %q is not a fixed point of bmcPath: %q, %v", what, uri, again, err)
	}
}

func cleanText(t *testing.T, what, s string, limit int) {
	t.Helper()
	if len(s) > limit || !utf8.ValidString(s) {
		t.Fatalf("%s: %d bytes (limit %d), valid UTF-8 %v: %q", what, len(s), limit, utf8.ValidString(s), s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			t.Fatalf("%s carries control character %U: %q", what, r, s)
		}
	}
}

func FuzzBMCPath(f *testing.F) {
	for _, s := range []string{"/redfish/v1/TaskService/Tasks/545", "https://10.0.0.1/redfish/v1/TaskService/TaskMonitors/1?x=1",
		"0", "@evil.example/x", ".evil.example/x", "//evil.example/x", "Tasks/1", "https:x", "/a b/%41", "/\\evil", "javascript:alert(1)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		p, err := bmcPath(uri)
		if err != nil {
			if p != "" {
				t.Fatalf("error with a path: %q", p)
			}
			return
		}
		onBMC(t, "bmcPath", p)
	})
}

func FuzzParseJob(f *testing.F) {
	for _, loc := range []string{"", "/redfish/v1/TaskService/TaskMonitors/1", "/redfish/v1/TaskService/Tasks/545",
		"https://10.0.0.1/redfish/v1/TaskService/Tasks/687/", "0", "@evil.example/x"} {
		f.Add(loc, mockup(f, "TaskService/Tasks/545"), false)
		f.Add(loc, mockup(f, "TaskService/Tasks/687"), true)
	}
	f.Add("", []byte(`{"TaskState":"Running","@odata.id":".evil/x","TaskMonitor":"https://other/m/1"}`), false)
	f.Add("", []byte(`{"@odata.type":"#Task.v1_7_4.Task"}`), true)
	f.Fuzz(func(t *testing.T, loc string, body []byte, cut bool) {
		rep := &reply{Status: http.StatusAccepted, Location: loc, Body: body}
		if cut {
			rep.BodyErr = errors.New("connection reset")
		}
		job, err := parseJob("SimpleUpdate", rep)
		if err != nil {
			if !cut || !errors.Is(err, ErrUnknownOutcome) || job != nil {
				t.Fatalf("parseJob error %v (cut %v, job %+v): only a cut answer with nothing to follow may fail, as ErrUnknownOutcome", err, cut, job)
			}
			return
		}
		onBMC(t, "MonitorURI", job.MonitorURI)
		onBMC(t, "TaskURI", job.TaskURI)
		// A usable Location is always followed.
		if p, err := bmcPath(loc); err == nil && job.MonitorURI != p && job.TaskURI != p {
			t.Fatalf("Location %q (%s) dropped: job %+v", loc, p, job)
		}
	})
}

func FuzzTask(f *testing.F) {
	for _, rel := range []string{"TaskService/Tasks/545", "TaskService/Tasks/687"} {
		f.Add(mockup(f, rel))
	}
	f.Add([]byte(`{"TaskState":"running","TaskStatus":"ok","PercentComplete":-5,"Messages":[{"Message":"\u001b]0;pwned\u0007"}]}`))
	f.Add([]byte(`{"TaskState":"Exception","TaskStatus":"Critical","PercentComplete":1000000,"@odata.id":"@evil/x"}`))
	f.Add([]byte(`{"TaskState":"Bogus"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var doc taskDoc
		if json.Unmarshal(body, &doc) != nil {
			return
		}
		res, err := doc.result()
		if err != nil {
			return
		}
		if !slices.Contains(TaskStates, res.State) {
			t.Fatalf("State %q not a Redfish TaskState", res.State)
		}
		if res.Status != "" && !slices.Contains(TaskStatuses, res.Status) {
			t.Fatalf("Status %q", res.Status)
		}
		if res.PercentComplete < 0 || res.PercentComplete > 100 {
			t.Fatalf("PercentComplete %d", res.PercentComplete)
		}
		if len(res.Messages) > maxTaskMessages+1 {
			t.Fatalf("%d messages kept", len(res.Messages))
		}
		for _, m := range res.Messages {
			cleanText(t, "task message", m, maxTaskMessageLen)
		}
		onBMC(t, "task @odata.id", res.TaskURI)
		task, monitor := doc.links()
		onBMC(t, "task link", task)
		onBMC(t, "monitor link", monitor)
		_, ferr := finish(res)
		if (ferr == nil) != (res.State == "Completed" && res.Status != "Critical") {
			t.Fatalf("finish(%s/%s) = %v", res.State, res.Status, ferr)
		}
		if ferr != nil && !errors.Is(ferr, ErrTaskFailed) {
			t.Fatalf("failed task error does not wrap ErrTaskFailed: %v", ferr)
		}
	})
}

func FuzzBootState(f *testing.F) {
	f.Add(mockup(f, "Systems/437XR1138R2"))
	f.Add([]byte(`{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideEnabled@Redfish.AllowableValues":["Disabled","Once"],"BootSourceOverrideMode":null}}`))
	f.Add([]byte(`{"Boot":{"BootSourceOverrideTarget":7,"BootSourceOverrideTarget@Redfish.AllowableValues":"Pxe"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		// The hot paths' decode: the power state and the reset action read
		// whatever Boot is, and never panic.
		if d, err := parseSystemDoc(body); err == nil {
			if ra, err := d.resetAction(); err == nil && ra != nil && len(ra.Allowed) > maxAllowable {
				t.Fatalf("%d reset types kept", len(ra.Allowed))
			}
		}
		st, err := parseBootState(body)
		if err != nil {
			return
		}
		for _, target := range []BootTarget{BootPxe, BootHdd, BootNone, BootUefiHttp} {
			for _, pol := range []BootModePolicy{BootModeAuto, BootModeUEFI, BootModeLegacy} {
				for _, once := range []bool{true, false} {
					p, err := planBootOverride(st, bootWant{Target: target, Once: once, Mode: pol, HTTPBootURI: "http://10.0.0.1/ipxe-bin/snponly.efi"})
					if err != nil {
						continue
					}
					if p.Target != "" && p.Target != string(target) && !(target == BootUefiHttp && p.Target == string(BootPxe)) {
						t.Fatalf("asked %s, patch targets %q", target, p.Target)
					}
					if p.Target != "" && len(st.AllowedTargets) > 0 && !slices.Contains(st.AllowedTargets, p.Target) {
						t.Fatalf("patch target %q outside the BMC's allowable %v", p.Target, st.AllowedTargets)
					}
					if p.Enabled != "" && !slices.Contains([]string{"Once", "Continuous", "Disabled"}, p.Enabled) {
						t.Fatalf("patch Enabled %q", p.Enabled)
					}
					if p.Enabled != "" && len(st.AllowedEnabled) > 0 && !slices.Contains(st.AllowedEnabled, p.Enabled) {
						t.Fatalf("patch Enabled %q outside the BMC's allowable %v", p.Enabled, st.AllowedEnabled)
					}
					if p.Mode != "" && p.Mode != st.Mode {
						// A mode changes only to UEFI or Legacy, only where the
						// BMC has the property and allows the value, and under
						// auto only for a network boot on a UEFI-capable BMC
						// (UEFI HTTP boot is UEFI by definition).
						if !st.HasMode || (p.Mode != ModeUEFI && p.Mode != ModeLegacy) ||
							(len(st.AllowedModes) > 0 && !slices.Contains(st.AllowedModes, p.Mode)) {
							t.Fatalf("patch mode %q (system %q, allowable %v, has mode %v)", p.Mode, st.Mode, st.AllowedModes, st.HasMode)
						}
						if pol == BootModeAuto && p.Target != string(BootUefiHttp) && !(networkTarget(BootTarget(p.Target)) && st.supportsUEFI()) {
							t.Fatalf("auto changed the mode %q -> %q for target %q", st.Mode, p.Mode, p.Target)
						}
						if pol == BootModeLegacy && p.Mode != ModeLegacy {
							t.Fatalf("legacy policy set mode %q", p.Mode)
						}
					}
					if p.HTTPBootURI != "" && (p.Target != string(BootUefiHttp) || !st.HasHTTPBootURI) {
						t.Fatalf("HttpBootUri set for target %q (has property %v)", p.Target, st.HasHTTPBootURI)
					}
					if _, err := json.Marshal(p); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	})
}

func FuzzUpdateService(f *testing.F) {
	us, info := mockup(f, "UpdateService"), mockup(f, "UpdateService/SimpleUpdateActionInfo")
	f.Add(us, info, "http://10.0.2.2:8080/artifacts/sha256/ab", "")
	f.Add([]byte(`{"Actions":{"#UpdateService.SimpleUpdate":{"target":"@evil/x","TransferProtocol@Redfish.AllowableValues":["HTTP"]}}}`), info, "https://a/x", "https")
	f.Add([]byte(`{"MultipartHttpPushUri":"0","FirmwareInventory":{"@odata.id":"https://x/redfish/v1/UpdateService/FirmwareInventory"}}`), []byte(`{"Parameters":[{"Name":"TransferProtocol","AllowableValues":null}]}`), "a/x", "HTTP")
	for _, c := range []string{"supermicro/UpdateService.json", "issue13/UpdateService-nested-scp.json"} {
		b, err := os.ReadFile(filepath.Join("../../qemu-test/vbmc/profiles", c))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, info, "http://10.0.2.2:8080/artifacts/sha256/ab", "")
	}
	f.Fuzz(func(t *testing.T, usBody, infoBody []byte, image, asked string) {
		caps, actionInfo, err := parseUpdateService(usBody)
		if err != nil {
			return
		}
		for what, u := range map[string]string{"SimpleUpdate target": caps.SimpleUpdateURI, "MultipartHttpPushUri": caps.MultipartPushURI,
			"FirmwareInventory": caps.InventoryURI, "ActionInfo": actionInfo, "URI": caps.URI} {
			onBMC(t, what, u)
		}
		if caps.SimpleUpdate != (caps.SimpleUpdateURI != "") {
			t.Fatalf("SimpleUpdate %v with target %q", caps.SimpleUpdate, caps.SimpleUpdateURI)
		}
		if actionInfo != "" {
			protos, err := parseActionInfoProtocols(infoBody)
			if err != nil {
				return
			}
			caps.TransferProtocols = protos
		}
		proto, err := ChooseTransferProtocol(image, asked, caps.TransferProtocols)
		if err == nil && len(caps.TransferProtocols) > 0 && !slices.Contains(caps.TransferProtocols, proto) {
			t.Fatalf("chose %q outside the allowable %v", proto, caps.TransferProtocols)
		}
		targets, err := targetURIs(caps.InventoryURI, []string{"BIOS", "HGX_FW_GPU_SXM_1", "/redfish/v1/UpdateService/FirmwareInventory/BMC"})
		if (err != nil) != (caps.InventoryURI == "") {
			t.Fatalf("targetURIs with inventory %q: %v", caps.InventoryURI, err)
		}
		for _, target := range targets {
			onBMC(t, "update target", target)
		}
	})
}

// FuzzLinks covers the other links the driver follows: Manager reset, Bios
// and its settings object, collection members.
func FuzzLinks(f *testing.F) {
	for _, rel := range []string{"Managers/BMC", "Systems/437XR1138R2", "Systems/437XR1138R2/Bios", "Systems/437XR1138R2/Bios/Settings", "TaskService/Tasks"} {
		f.Add(mockup(f, rel))
	}
	f.Add([]byte(`{"Actions":{"#Manager.Reset":{"target":".evil/x","ResetType@Redfish.AllowableValues":["ForceRestart"]}},"Bios":{"@odata.id":"0"},"@Redfish.Settings":{"SettingsObject":{"@odata.id":"@e/x"}},"Members":[{"@odata.id":"x"},{"@odata.id":"/ok"}]}`))
	for _, c := range []string{"lenovo-xcc/Bios-settings.json", "issue13/Bios-no-settings.json", "issue13/System-reset-run-together.json"} {
		b, err := os.ReadFile(filepath.Join("../../qemu-test/vbmc/profiles", c))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"@odata.id":"/redfish/v1/Systems/1/bios","Attributes":{},"Oem":{"Hp":{"Links":{"Settings":{"href":"/rest/v1/systems/1/bios/Settings"}}}}}`))
	f.Add([]byte(`{"@odata.id":"/redfish/v1/Systems/1/Bios","Attributes":{"A":1},"Oem":{"X":{"SettingsObject":{"@odata.id":"https://evil/x"}}}}`))
	f.Add([]byte(`{"Actions":{"#Manager.Reset":{"target":"/redfish/v1/Managers/1/Actions/Manager.Reset","ResetType@Redfish.AllowableValues":[["GracefulRestartForceRestart"]]}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if target, allowed, err := parseManagerReset(body); err == nil {
			onBMC(t, "Manager.Reset target", target)
			if rt, err := chooseReset("GracefulRestart", allowed); err == nil && len(allowed) > 0 && !slices.Contains(allowed, rt) {
				t.Fatalf("reset %q outside the allowable %v", rt, allowed)
			}
		}
		if target, err := parseSystemReset(body); err == nil {
			onBMC(t, "ComputerSystem.Reset target", target)
		}
		if link, err := parseBiosLink(body); err == nil {
			onBMC(t, "Bios link", link)
		}
		if doc, err := parseBios(body); err == nil {
			onBMC(t, "Bios @odata.id", doc.ODataID)
			if doc.Settings != nil {
				onBMC(t, "settings object", doc.Settings.SettingsObject.ID)
			}
		}
		if ms, err := parseMembers(body); err == nil {
			if len(ms) > maxMembers {
				t.Fatalf("%d members", len(ms))
			}
			for _, m := range ms {
				onBMC(t, "member", m)
			}
		}
	})
}

// fuzzBMC is a virtual BMC in memory, whose task monitor and task answer
// what the fuzzer says. It records any request that is not for the BMC.
type fuzzBMC struct {
	h       http.Handler
	mu      sync.Mutex
	answers []fuzzAnswer // for /fuzz/ paths, in order; the last repeats
	n       int
	foreign []string
}

type fuzzAnswer struct {
	status   int
	location string
	body     []byte
}

func (b *fuzzBMC) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != "bmc.fuzz" {
		b.mu.Lock()
		b.foreign = append(b.foreign, r.URL.String())
		b.mu.Unlock()
		return nil, errors.New("foreign host")
	}
	rec := httptest.NewRecorder()
	if strings.HasPrefix(r.URL.Path, "/fuzz/") {
		b.mu.Lock()
		a := b.answers[min(b.n, len(b.answers)-1)]
		b.n++
		b.mu.Unlock()
		if a.location != "" {
			rec.Header().Set("Location", a.location)
		}
		rec.WriteHeader(a.status)
		rec.Write(a.body)
	} else {
		b.h.ServeHTTP(rec, r)
	}
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// FuzzWaitTask drives WaitTask end to end against answers a BMC could give
// its task monitor and task: it must end (an error, not a hang), report a
// Redfish state, and never send a request anywhere but the BMC.
func FuzzWaitTask(f *testing.F) {
	t545, t687 := mockup(f, "TaskService/Tasks/545"), mockup(f, "TaskService/Tasks/687")
	f.Add(202, "", t687, 200, "", t545, true)
	f.Add(202, "", []byte(`{"TaskState":"Running","TaskMonitor":"@evil.example/m"}`), 404, "", []byte(nil), false)
	f.Add(307, "https://evil.example/fuzz/m", []byte(nil), 200, "", t545, false)
	f.Add(200, "", []byte(`{"TaskState":"Exception","TaskStatus":"Critical","Messages":[{"Message":"flash failed"}]}`), 200, "", []byte(nil), false)
	f.Add(503, "", []byte(`busy`), 410, "", []byte(nil), true)
	b, err := vbmc.New(vbmc.Config{Name: "fuzz", Logger: discardLogger()}, vbmc.NewFakeMachine())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close(context.Background()) })
	f.Fuzz(func(t *testing.T, s1 int, loc1 string, body1 []byte, s2 int, loc2 string, body2 []byte, withTask bool) {
		status := func(s int) int { return 200 + ((s%400)+400)%400 }
		fb := &fuzzBMC{h: b.Handler(), answers: []fuzzAnswer{{status(s1), loc1, body1}, {status(s2), loc2, body2}}}
		// A hang is a failure too: crash with every goroutine's stack, so
		// the fuzzer keeps the input.
		watchdog := time.AfterFunc(20*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("FuzzWaitTask iteration hung for 20s:\n%s", buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := Connect(ctx, Endpoint{URL: "https://bmc.fuzz", Username: "admin", Password: "password"},
			Options{Timeout: time.Second, Logger: discardLogger(), HTTPClient: &http.Client{Transport: fb}})
		if err != nil {
			t.Fatalf("Connect to the in-memory BMC: %v", err)
		}
		defer c.Close(context.Background())
		job := &Job{Op: "SimpleUpdate", MonitorURI: "/fuzz/monitor"}
		if withTask {
			job.TaskURI = "/fuzz/task"
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer wcancel()
		start := time.Now()
		res, err := c.WaitTask(wctx, job, time.Millisecond)
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("WaitTask took %v on a 60ms budget", d)
		}
		if err == nil {
			if res == nil || (res.State != "Completed" && res.State != TaskGone) || res.Status == "Critical" {
				t.Fatalf("WaitTask succeeded with %+v", res)
			}
		}
		if res != nil {
			if res.State != TaskGone && !slices.Contains(TaskStates, res.State) {
				t.Fatalf("State %q", res.State)
			}
			if res.PercentComplete < 0 || res.PercentComplete > 100 {
				t.Fatalf("PercentComplete %d", res.PercentComplete)
			}
			for _, m := range res.Messages {
				cleanText(t, "message", m, maxTaskMessageLen)
			}
			onBMC(t, "TaskURI", res.TaskURI)
		}
		fb.mu.Lock()
		defer fb.mu.Unlock()
		if len(fb.foreign) > 0 {
			t.Fatalf("requests left the BMC: %q", fb.foreign)
		}
	})
}

// cleanSensor checks one decoded reading: a finite value, bounded clean
// text, a Redfish health or none.
func cleanSensor(t *testing.T, r SensorReading) {
	t.Helper()
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		t.Fatalf("reading %q is %v", r.Key, r.Value)
	}
	cleanText(t, "sensor key", r.Key, sensorKeyLimit)
	cleanText(t, "sensor name", r.Name, maxTextLen+len(" output"))
	cleanText(t, "sensor units", r.Units, maxUnitsLen)
	if r.Key == "" || r.Kind == "" {
		t.Fatalf("reading without a key or kind: %+v", r)
	}
	if r.Health != "" && r.Health != "OK" && r.Health != "Warning" && r.Health != "Critical" {
		t.Fatalf("health %q", r.Health)
	}
}

func cleanPart(t *testing.T, p Part) {
	t.Helper()
	for _, s := range []string{p.ID, p.Name, p.Manufacturer, p.Model, p.PartNumber, p.SparePartNumber, p.SerialNumber, p.FirmwareVersion, p.State, p.Location} {
		cleanText(t, "part field", s, maxTextLen)
	}
	if p.Health != "" && p.Health != "OK" && p.Health != "Warning" && p.Health != "Critical" {
		t.Fatalf("health %q", p.Health)
	}
}

// FuzzHealthDecoders feeds the chassis, sensor, Thermal/Power and part
// decoders what a BMC could send: links stay on the BMC, readings are
// finite, text is bounded and clean, and counts are bounded.
func FuzzHealthDecoders(f *testing.F) {
	for _, rel := range []string{"Chassis/1U", "Chassis/1U/Sensors", "Chassis/1U/Sensors/CPU1Temp", "Chassis/1U/Sensors/CPUFan1",
		"Chassis/1U/Thermal", "Chassis/1U/Power", "Chassis/1U/PowerSubsystem", "Chassis/1U/ThermalSubsystem",
		"Chassis/1U/PowerSubsystem/PowerSupplies/Bay1", "Chassis/1U/ThermalSubsystem/Fans/CPU1"} {
		f.Add(mockup(f, rel))
	}
	// What the live virtual BMC serves (expanded members, live readings).
	b, err := vbmc.New(vbmc.Config{Name: "seed", Logger: discardLogger()}, vbmc.NewFakeMachine())
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/redfish/v1/Chassis/1U/Sensors?$expand=.($levels=1)", "/redfish/v1/Chassis/1U/Thermal", "/redfish/v1/Chassis/1U/Power"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.SetBasicAuth("admin", "password")
		b.Handler().ServeHTTP(rec, req)
		f.Add(rec.Body.Bytes())
	}
	b.Close(context.Background())
	f.Add([]byte(`{"Sensors":{"@odata.id":"@evil.example/x"},"Thermal":{"@odata.id":"https://evil.example/redfish/v1/T"},"Members":[{"Reading":1e308,"ReadingType":"Temperature","ReadingUnits":"Cel\u202e","Id":"\u001b[2J"},{"@odata.id":"0"}]}`))
	f.Add([]byte(`{"Temperatures":[{"Name":"x","ReadingCelsius":null},{"MemberId":"1","ReadingCelsius":-3.5,"Status":{"Health":"Bad"}}],"Fans":[{"Name":"f","Reading":50,"ReadingUnits":"Percent"}],"PowerSupplies":[{"SerialNumber":"\u0000SN","PowerInputWatts":"12"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if l, err := parseChassisLinks(body); err == nil {
			for _, u := range []string{l.Sensors, l.Thermal, l.Power, l.ThermalSubsystem, l.PowerSubsystem} {
				onBMC(t, "chassis link", u)
			}
			cleanText(t, "chassis id", l.ID, maxTextLen)
		}
		if rs, pending, skipped, err := parseSensorCollection(body); err == nil {
			if len(pending) > maxSensors || skipped < 0 || len(rs) > maxMembers {
				t.Fatalf("%d readings, %d pending, %d skipped", len(rs), len(pending), skipped)
			}
			for _, p := range pending {
				onBMC(t, "sensor member", p)
			}
			for _, r := range rs {
				cleanSensor(t, r)
			}
		}
		if r, ok := parseSensor(body); ok {
			cleanSensor(t, r)
		}
		if rs, _, err := parseLegacySensors(body); err == nil {
			if len(rs) > maxSensors {
				t.Fatalf("%d legacy readings (limit %d)", len(rs), maxSensors)
			}
			for _, r := range rs {
				cleanSensor(t, r)
			}
		}
		if p, err := parsePart(body); err == nil {
			cleanPart(t, p)
		}
		for _, key := range []string{"PowerSupplies", "Fans"} {
			if ps, _, err := parseLegacyParts(body, key); err == nil {
				if len(ps) > maxParts {
					t.Fatalf("%d parts (limit %d)", len(ps), maxParts)
				}
				for _, p := range ps {
					cleanPart(t, p)
				}
			}
			if l, err := parseSubsystemLink(body, key); err == nil {
				onBMC(t, "subsystem link", l)
			}
		}
	})
}

// FuzzLogDecoders feeds the LogService and Entries decoders what a BMC
// could send: the next page and Entries links stay on the BMC, every
// entry kept has a time, text is bounded and clean.
func FuzzLogDecoders(f *testing.F) {
	for _, rel := range []string{"Systems/437XR1138R2/LogServices/Log1", "Systems/437XR1138R2/LogServices/Log1/Entries",
		"Managers/BMC/LogServices/Log/Entries", "Systems/437XR1138R2/LogServices/Log1/Entries/1"} {
		f.Add(mockup(f, rel))
	}
	f.Add([]byte(`{"Members":[{"Id":"1","Created":"2026-05-01T10:00:00+06:00","Severity":"Critical","Message":"PSU 2\u001b[31m lost","MessageId":"Power.1.0.PowerSupplyFailed","SensorType":"Power Supply / Converter"}],"Members@odata.nextLink":"/redfish/v1/x?$skip=1"}`))
	f.Add([]byte(`{"Members":[{"Created":"yesterday"},{"Created":"2026-05-01T10:00:00"}],"@odata.nextLink":"@evil.example/p"}`))
	f.Add([]byte(`{"Id":"Sel","Entries":{"@odata.id":"//evil.example/e"},"LogEntryType":"SEL"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if s, err := parseLogService(body); err == nil {
			onBMC(t, "Entries link", s.Entries)
			cleanText(t, "log id", s.ID, maxTextLen)
			cleanText(t, "log name", s.Name, maxTextLen)
		}
		pg, err := parseEntryPage(body, "Sel")
		if err != nil {
			return
		}
		onBMC(t, "next page", pg.Next)
		for _, e := range pg.Entries {
			if e.Created.IsZero() {
				t.Fatalf("entry kept without a time: %+v", e)
			}
			cleanText(t, "message", e.Message, maxMessageLen)
			for _, s := range []string{e.ID, e.MessageID, e.SensorType, e.EntryCode} {
				cleanText(t, "entry field", s, maxTextLen)
			}
			if e.Severity != "" && e.Severity != "OK" && e.Severity != "Warning" && e.Severity != "Critical" {
				t.Fatalf("severity %q", e.Severity)
			}
		}
		kept, dropped := boundEntries(pg.Entries, 3)
		if len(kept) > 3 || len(kept)+dropped != len(pg.Entries) {
			t.Fatalf("bound 3 of %d: kept %d, dropped %d", len(pg.Entries), len(kept), dropped)
		}
		for i := 1; i < len(kept); i++ {
			if kept[i].Created.Before(kept[i-1].Created) {
				t.Fatal("kept entries not oldest first")
			}
		}
	})
}

// FuzzInventoryPage feeds the FirmwareInventory page decoder what a BMC
// could send, expanded or not: every link and the next page stay on the
// BMC, a page is bounded, a member's related items are bounded.
func FuzzInventoryPage(f *testing.F) {
	b, err := vbmc.New(vbmc.Config{Name: "seed", Logger: discardLogger()}, vbmc.NewFakeMachine())
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/redfish/v1/UpdateService/FirmwareInventory?$expand=.($levels=1)", "/redfish/v1/UpdateService/FirmwareInventory"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.SetBasicAuth("admin", "password")
		b.Handler().ServeHTTP(rec, req)
		f.Add(rec.Body.Bytes())
	}
	b.Close(context.Background())
	f.Add([]byte(`{"Members":[{"@odata.id":"https://evil.example/redfish/v1/x"},{"Id":"BMC","Version":"1","RelatedItem":[{"@odata.id":"/a"},{"@odata.id":""}]}],"Members@odata.nextLink":"//evil.example/p"}`))
	f.Add([]byte(`{"Members":[{},{"@odata.id":"/redfish/v1/UpdateService/FirmwareInventory/1"}],"Members@odata.nextLink":"/redfish/v1/UpdateService/FirmwareInventory?$skip=1"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, links, next, err := decodeInventoryPage(bytes.NewReader(body))
		if err != nil {
			return
		}
		if len(items)+len(links) > maxInventoryMembers {
			t.Fatalf("%d items and %d links (limit %d)", len(items), len(links), maxInventoryMembers)
		}
		for _, l := range links {
			onBMC(t, "inventory member", l)
		}
		onBMC(t, "inventory next page", next)
		for _, it := range items {
			if len(it.RelatedItems) > 16 {
				t.Fatalf("%d related items", len(it.RelatedItems))
			}
			if it.ID == "" && it.Version == "" {
				t.Fatalf("an item with neither Id nor Version: %+v", it)
			}
		}
	})
}
