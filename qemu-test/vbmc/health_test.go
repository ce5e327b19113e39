package vbmc

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func getJSON(t *testing.T, b *BMC, path string) map[string]any {
	t.Helper()
	rec := do(t, b, "GET", path, "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	var obj map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return obj
}

func reading(t *testing.T, b *BMC, id string) float64 {
	t.Helper()
	v, ok := getJSON(t, b, sensorsURL+"/"+id)["Reading"].(float64)
	if !ok {
		t.Fatalf("sensor %s has no numeric Reading", id)
	}
	return v
}

// The sensors follow the host: power off is standby, a loaded host draws
// more at once and heats up (and spins its fans) over the thermal time
// constant, and an idle one cools down again.
func TestSensorsFollowLoad(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, _ := newFakeBMC(t, Config{Now: clk.Now, ThermalTau: 10 * time.Second})
	if w := reading(t, b, "TotalPower"); w != 9 {
		t.Errorf("TotalPower of a host that is off = %v W, want the 9 W standby", w)
	}
	if rpm := reading(t, b, "CPUFan1"); rpm != 0 {
		t.Errorf("fan of a host that is off = %v RPM", rpm)
	}
	if rec := do(t, b, "POST", sysPath(b)+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("power on: %d %s", rec.Code, rec.Body)
	}
	b.SetLoad(0)
	clk.Add(time.Minute)
	idleTemp, idleFan, idleW := reading(t, b, "CPU1Temp"), reading(t, b, "CPUFan1"), reading(t, b, "TotalPower")
	if idleTemp < 30 || idleTemp > 40 || idleFan < 2000 || idleW < 90 || idleW > 100 {
		t.Fatalf("idle host: CPU %v C, fan %v RPM, %v W", idleTemp, idleFan, idleW)
	}
	b.SetLoad(1)
	if w := reading(t, b, "TotalPower"); w < 400 {
		t.Errorf("loaded host draws %v W at once, want ≥ 400", w)
	}
	if c := reading(t, b, "CPU1Temp"); c != idleTemp {
		t.Errorf("CPU temperature jumped to %v C with no time passing (thermal mass)", c)
	}
	clk.Add(10 * time.Second) // one time constant: ~63 % of the way
	mid := reading(t, b, "CPU1Temp")
	clk.Add(2 * time.Minute)
	hot, fan := reading(t, b, "CPU1Temp"), reading(t, b, "CPUFan1")
	if !(mid > idleTemp+20 && hot > mid && hot >= 80) {
		t.Errorf("CPU temperature under load: idle %v, after 1 τ %v, after 13 τ %v C", idleTemp, mid, hot)
	}
	if fan < 9000 {
		t.Errorf("fan under load %v RPM, want near 9600", fan)
	}
	// The hot CPU is over its caution threshold: its health says so.
	if h := getJSON(t, b, sensorsURL+"/CPU1Temp")["Status"].(map[string]any)["Health"]; hot >= 85 && h != "Warning" {
		t.Errorf("CPU at %v C has health %v, want Warning", hot, h)
	}
	b.SetLoad(0)
	clk.Add(5 * time.Minute)
	if c := reading(t, b, "CPU1Temp"); c > idleTemp+1 {
		t.Errorf("CPU did not cool down: %v C, idle was %v", c, idleTemp)
	}
}

func sysPath(b *BMC) string { return odataRoot + "/Systems/" + b.cfg.SystemID }

// The utilisation comes from the machine's CPU time when it reports one.
type cpuMachine struct {
	*FakeMachine
	mu   sync.Mutex
	used time.Duration
}

func (m *cpuMachine) CPUTime() (time.Duration, int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used, 2, m.Running()
}

func TestSensorsFromCPUTime(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m := &cpuMachine{FakeMachine: NewFakeMachine()}
	b, err := New(Config{Name: "cpu", Now: clk.Now, Logger: testLogger(t)}, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(t.Context()) })
	do(t, b, "POST", sysPath(b)+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	reading(t, b, "TotalPower") // baseline
	clk.Add(10 * time.Second)
	m.mu.Lock()
	m.used += 15 * time.Second // 1.5 of 2 CPUs busy for 10 s: 75 %
	m.mu.Unlock()
	if w, want := reading(t, b, "TotalPower"), 95+310*0.75; w < want-1 || w > want+1 {
		t.Errorf("TotalPower at 75 %% CPU = %v W, want %v", w, want)
	}
	// A new QEMU process starts its CPU time at zero: a new baseline, not
	// a negative load.
	m.mu.Lock()
	m.used = 0
	m.mu.Unlock()
	clk.Add(2 * time.Second)
	if w := reading(t, b, "TotalPower"); w < 95 {
		t.Errorf("TotalPower after the CPU time went back = %v W", w)
	}
}

func TestParseProcStatCPU(t *testing.T) {
	line := "4242 (qemu-system-x86) with) spaces) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 567 0 0 20 0 3 0 100 0 0\n"
	got, err := parseProcStatCPU(line)
	if err != nil || got != (1234+567)*10*time.Millisecond {
		t.Fatalf("parseProcStatCPU = %v, %v; want 18.01s", got, err)
	}
	for _, bad := range []string{"", "4242 (qemu S 1", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -1 5"} {
		if _, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("parseProcStatCPU(%q) accepted", bad)
		}
	}
}

// Each sensor API serves what it says and 404s the rest; the chassis links
// only what is there.
func TestSensorAPIs(t *testing.T) {
	for _, tc := range []struct {
		api            string
		legacy, modern bool
	}{{SensorAPIBoth, true, true}, {SensorAPILegacy, true, false}, {SensorAPISensors, false, true}} {
		t.Run("api="+tc.api, func(t *testing.T) {
			b, _ := newFakeBMC(t, Config{SensorAPI: tc.api})
			ch := getJSON(t, b, chassisURL)
			for _, c := range []struct {
				link, url string
				want      bool
			}{{"Thermal", thermalURL, tc.legacy}, {"Power", powerURL, tc.legacy}, {"Sensors", sensorsURL, tc.modern},
				{"ThermalSubsystem", fansURL, tc.modern}, {"PowerSubsystem", powerSuppliesURL + "/Bay1", tc.modern}} {
				_, linked := ch[c.link]
				code := do(t, b, "GET", c.url, "", "").Code
				if linked != c.want || (code == http.StatusOK) != c.want {
					t.Errorf("%s: linked %v, GET %s %d; want present=%v", c.link, linked, c.url, code, c.want)
				}
			}
			if tc.legacy {
				th := getJSON(t, b, thermalURL)
				fans := th["Fans"].([]any)
				if len(fans) != 4 || fans[0].(map[string]any)["SerialNumber"] == "" {
					t.Errorf("Thermal.Fans: %v", fans)
				}
				pw := getJSON(t, b, powerURL)
				if ps := pw["PowerSupplies"].([]any); len(ps) != 2 || ps[1].(map[string]any)["PartNumber"] != "23456-133" {
					t.Errorf("Power.PowerSupplies: %v", ps)
				}
			}
			if tc.modern {
				coll := getJSON(t, b, sensorsURL)
				if n := len(coll["Members"].([]any)); n != len(liveSensors) {
					t.Errorf("Sensors lists %d members, want the %d live ones", n, len(liveSensors))
				}
				psu := getJSON(t, b, powerSuppliesURL+"/Bay2")
				if psu["SerialNumber"] != "437XR1138R2-PSU2" || psu["Status"].(map[string]any)["Health"] != "OK" {
					t.Errorf("PSU Bay2: %v", psu)
				}
			}
		})
	}
}

// $expand=.($levels=1) gives the sensors in one request where the BMC
// implements it; with NoExpand, links only and no ExpandQuery advertised.
func TestSensorsExpand(t *testing.T) {
	for _, noExpand := range []bool{false, true} {
		b, _ := newFakeBMC(t, Config{NoExpand: noExpand})
		coll := getJSON(t, b, sensorsURL+"?$expand=.($levels=1)")
		_, expanded := coll["Members"].([]any)[0].(map[string]any)["Reading"]
		_, advertised := getJSON(t, b, odataRoot)["ProtocolFeaturesSupported"].(map[string]any)["ExpandQuery"]
		if expanded == noExpand || advertised == noExpand {
			t.Errorf("NoExpand=%v: members expanded %v, ExpandQuery advertised %v", noExpand, expanded, advertised)
		}
	}
	if !expandsOneLevel("$expand=%2E%28%24levels%3D1%29") && !expandsOneLevel("%24expand=.") {
		t.Error("URL-encoded $expand not understood")
	}
	if expandsOneLevel("$expand=~") || expandsOneLevel("$skip=1") {
		t.Error("expandsOneLevel accepts what is not a one-level expand")
	}
}

func TestSetSensorPins(t *testing.T) {
	b, _ := newFakeBMC(t, Config{})
	if err := b.SetSensor("CPU1Temp", 97); err != nil {
		t.Fatal(err)
	}
	s := getJSON(t, b, sensorsURL+"/CPU1Temp")
	if s["Reading"] != 97.0 || s["Status"].(map[string]any)["Health"] != "Critical" {
		t.Errorf("pinned CPU1Temp: %v", s)
	}
	b.ClearSensor("CPU1Temp")
	if v := reading(t, b, "CPU1Temp"); v == 97 {
		t.Error("ClearSensor left the reading pinned")
	}
	if err := b.SetSensor("NoSuch", 1); err == nil || !strings.Contains(err.Error(), "CPU1Temp") {
		t.Errorf("SetSensor of an unknown sensor: %v (want the list of sensors)", err)
	}
}

// A failed PSU shows in its health, draws nothing (the other carries the
// load) and is logged as the BMC would.
func TestPartHealthLogsEvent(t *testing.T) {
	b, _ := newFakeBMC(t, Config{Serial: "SN42"})
	do(t, b, "POST", sysPath(b)+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	before := len(b.EventLog())
	if err := b.SetPartHealth(PartPSU, "Bay2", "Critical", "Power supply 'PSU 2' has failed: input lost."); err != nil {
		t.Fatal(err)
	}
	psu := getJSON(t, b, powerSuppliesURL+"/Bay2")
	if psu["Status"].(map[string]any)["Health"] != "Critical" || psu["SerialNumber"] != "SN42-PSU2" {
		t.Errorf("failed PSU: %v", psu)
	}
	if w := reading(t, b, "PS2InputPower"); w != 0 {
		t.Errorf("failed PSU draws %v W", w)
	}
	if a, total := reading(t, b, "PS1InputPower"), reading(t, b, "TotalPower"); a < total {
		t.Errorf("the remaining PSU draws %v W of %v W", a, total)
	}
	log := b.EventLog()
	if len(log) != before+1 {
		t.Fatalf("log grew by %d entries, want 1", len(log)-before)
	}
	e := log[len(log)-1]
	if e.Severity != "Critical" || e.SensorType != "Power Supply / Converter" || e.MessageID != "Power.1.0.PowerSupplyFailed" || !strings.Contains(e.Message, "input lost") {
		t.Errorf("PSU event: %+v", e)
	}
	if err := b.SetPartHealth(PartFan, "CPU1", "Critical", ""); err != nil {
		t.Fatal(err)
	}
	if rpm := reading(t, b, "CPUFan1"); rpm != 0 {
		t.Errorf("failed fan spins at %v RPM", rpm)
	}
	for _, bad := range [][3]string{{"psu", "Bay9", "OK"}, {"disk", "Bay1", "OK"}, {"fan", "CPU1", "Broken"}} {
		if err := b.SetPartHealth(bad[0], bad[1], bad[2], ""); err == nil {
			t.Errorf("SetPartHealth%v accepted", bad)
		}
	}
}

// The BMC logs what it does to the host.
func TestPowerEventsLogged(t *testing.T) {
	b, m := newFakeBMC(t, Config{})
	for _, rt := range []string{"On", "ForceRestart", "ForceOff"} {
		if rec := do(t, b, "POST", sysPath(b)+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"`+rt+`"}`); rec.Code != http.StatusNoContent {
			t.Fatalf("%s: %d", rt, rec.Code)
		}
	}
	do(t, b, "POST", sysPath(b)+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`)
	m.Crash(errTest)
	waitFor(t, 5*time.Second, "the host off after a crash", func() bool { return b.PowerState() == PowerOff })
	var got []string
	for _, e := range b.EventLog() {
		got = append(got, e.MessageID)
	}
	want := []string{MsgHostReset, MsgHostPoweredOn, MsgHostReset, MsgHostPoweredOff, MsgHostPoweredOn, MsgHostReset, MsgHostPoweredOff,
		MsgHostReset, MsgHostPoweredOn, MsgHostPoweredOff, "VBMC.1.0.HostStopped"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("log:\n got %v\nwant %v", got, want)
	}
}

type testErr string

func (e testErr) Error() string { return string(e) }

const errTest = testErr("qemu: terminating on signal 9")

func entries(t *testing.T, b *BMC, path string) ([]map[string]any, string, float64) {
	t.Helper()
	page := getJSON(t, b, path)
	var out []map[string]any
	for _, m := range page["Members"].([]any) {
		out = append(out, m.(map[string]any))
	}
	next, _ := page["Members@odata.nextLink"].(string)
	return out, next, page["Members@odata.count"].(float64)
}

// The log pages by $skip behind @odata.nextLink, newest first where the
// vendor lists it so, in the zone the vendor writes, wraps when full and
// can be cleared.
func TestEventLogPaging(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	b, _ := newFakeBMC(t, Config{Now: clk.Now, EventLog: LogShape{Under: "Managers", ID: "Sel", PageSize: 3, NewestFirst: true, MaxRecords: 7, UTCOffset: -5 * time.Hour}})
	for i := range 8 {
		clk.Add(time.Minute)
		if _, err := b.LogEvent(Event{Severity: "Warning", Message: "event " + string(rune('a'+i)), SensorType: "Temperature"}); err != nil {
			t.Fatal(err)
		}
	}
	svc := managerURL + "/LogServices"
	coll := getJSON(t, b, svc)
	if ids := parseMemberIDs(mustJSON(t, coll)); len(ids) < 2 || ids[0] != svc+"/Sel" {
		t.Errorf("LogServices lists %v: want the live Sel first, the mockup's logs after", ids)
	}
	var msgs []string
	next := svc + "/Sel/Entries"
	pages := 0
	for next != "" {
		var page []map[string]any
		var count float64
		page, next, count = entries(t, b, next)
		if count != 7 {
			t.Errorf("Members@odata.count %v, want 7 (the log wrapped at MaxRecords)", count)
		}
		if len(page) > 3 {
			t.Errorf("page of %d entries, PageSize 3", len(page))
		}
		for _, e := range page {
			msgs = append(msgs, e["Message"].(string))
		}
		pages++
	}
	if got := strings.Join(msgs, ","); got != "event h,event g,event f,event e,event d,event c,event b" {
		t.Errorf("entries newest first across %d pages: %q", pages, got)
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	first, _, _ := entries(t, b, svc+"/Sel/Entries?$top=1")
	if c := first[0]["Created"].(string); !strings.HasSuffix(c, "-05:00") {
		t.Errorf("Created %q not in the vendor's zone", c)
	}
	if e := getJSON(t, b, first[0]["@odata.id"].(string)); e["Message"] != "event h" {
		t.Errorf("entry by its @odata.id: %v", e)
	}
	if rec := do(t, b, "GET", svc+"/Sel/Entries?$skip=x", "", ""); rec.Code != http.StatusBadRequest {
		t.Errorf("$skip=x: %d", rec.Code)
	}
	if rec := do(t, b, "POST", svc+"/Sel/Actions/LogService.ClearLog", "", "{}"); rec.Code != http.StatusNoContent {
		t.Fatalf("ClearLog: %d", rec.Code)
	}
	if l := b.EventLog(); len(l) != 1 || l[0].MessageID != MsgLogCleared {
		t.Errorf("after ClearLog: %+v", l)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The hooks need the BMC's credentials and change what it reports.
func TestHooks(t *testing.T) {
	b, _ := newFakeBMC(t, Config{})
	body := `{"Severity":"Critical","Message":"PSU 2 lost input","MessageID":"Power.1.0.PowerSupplyFailed","SensorType":"Power Supply / Converter","Created":"2020-01-01T00:00:00Z"}`
	if rec := do(t, b, "POST", "/vbmc/events", "-", body); rec.Code != http.StatusUnauthorized {
		t.Errorf("unauthenticated event: %d", rec.Code)
	}
	if rec := do(t, b, "POST", "/vbmc/events", "", body); rec.Code != http.StatusOK {
		t.Fatalf("event: %d %s", rec.Code, rec.Body)
	}
	l := b.EventLog()
	if len(l) != 1 || !l[0].Created.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || l[0].Severity != "Critical" {
		t.Errorf("injected event: %+v", l)
	}
	if rec := do(t, b, "POST", "/vbmc/sensors", "", `{"Sensor":"IntakeTemp","Reading":44}`); rec.Code != http.StatusOK || reading(t, b, "IntakeTemp") != 44 {
		t.Errorf("pin sensor: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, b, "POST", "/vbmc/parts", "", `{"Kind":"fan","ID":"Bay1","Health":"Warning"}`); rec.Code != http.StatusNoContent {
		t.Errorf("part health: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, b, "POST", "/vbmc/events", "", `{"Severity":"Bad","Message":"x"}`); rec.Code != http.StatusBadRequest {
		t.Errorf("bad severity: %d", rec.Code)
	}
}
