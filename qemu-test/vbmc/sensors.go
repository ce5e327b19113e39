package vbmc

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Sensor APIs a BMC serves (Config.SensorAPI). Real BMCs differ: older
// ones have only the Thermal and Power resources (deprecated since Redfish
// 2020.4), newer ones only the Sensors collection with ThermalSubsystem and
// PowerSubsystem, many both.
const (
	SensorAPIBoth    = ""        // Thermal and Power, and Sensors with ThermalSubsystem and PowerSubsystem (the DMTF mockup)
	SensorAPILegacy  = "legacy"  // Thermal and Power only
	SensorAPISensors = "sensors" // Sensors, ThermalSubsystem and PowerSubsystem only
)

const (
	chassisURL       = odataRoot + "/Chassis/1U"
	sensorsURL       = chassisURL + "/Sensors"
	thermalURL       = chassisURL + "/Thermal"
	powerURL         = chassisURL + "/Power"
	thermalSubURL    = chassisURL + "/ThermalSubsystem"
	powerSubURL      = chassisURL + "/PowerSubsystem"
	fansURL          = thermalSubURL + "/Fans"
	powerSuppliesURL = powerSubURL + "/PowerSupplies"
)

// CPUTimer is a Machine whose host CPU time the BMC reads, so that its
// sensors follow the guest's load as a real BMC's follow its host's
// (QEMUMachine: the QEMU process's user+system time).
type CPUTimer interface {
	// CPUTime is the CPU time the running host has used and its CPU count;
	// ok is false while it is not running.
	CPUTime() (used time.Duration, cpus int, ok bool)
}

// hostState is what the sensors are a function of.
type hostState struct {
	on   bool
	load float64 // CPU utilisation now, 0..1
	heat float64 // load smoothed by the thermal time constant, 0..1
	// psuOK and fanOK say which parts work (health not Critical).
	psuOK []bool
	fanOK []bool
}

func (h hostState) healthyPSUs() int {
	n := 0
	for _, ok := range h.psuOK {
		if ok {
			n++
		}
	}
	return n
}

// sensorDef is one live sensor and how its reading follows the host.
type sensorDef struct {
	id, name    string
	readingType string // Redfish ReadingType
	units       string // Redfish ReadingUnits (UCUM)
	context     string // PhysicalContext
	// legacy is the Thermal/Power array it appears in ("" for none).
	legacy                      string
	upperCaution, upperCritical float64 // 0: none
	value                       func(h hostState) float64
}

const ambientC = 24

func temp(idleRise, loadRise float64) func(hostState) float64 {
	return func(h hostState) float64 {
		v := ambientC + loadRise*h.heat
		if h.on {
			v += idleRise
		}
		return v
	}
}

func fanRPM(i int, idle, span float64) func(hostState) float64 {
	return func(h hostState) float64 {
		if !h.on || i < len(h.fanOK) && !h.fanOK[i] {
			return 0
		}
		return idle + span*h.heat
	}
}

func totalPower(h hostState) float64 {
	if !h.on {
		return 9 // standby: the BMC itself
	}
	return 95 + 310*h.load
}

// psuInput is one supply's share of the input power: healthy supplies
// share the load, a failed one draws nothing.
func psuInput(i int) func(hostState) float64 {
	return func(h hostState) float64 {
		if i < len(h.psuOK) && !h.psuOK[i] || h.healthyPSUs() == 0 {
			return 0
		}
		return totalPower(h) / 0.94 / float64(h.healthyPSUs())
	}
}

func psuVolts(i int) func(hostState) float64 {
	return func(h hostState) float64 {
		if i < len(h.psuOK) && !h.psuOK[i] {
			return 0
		}
		return 229.5
	}
}

// liveSensors are the sensors this BMC keeps, with the mockup's Ids.
var liveSensors = []sensorDef{
	{id: "CPU1Temp", name: "CPU #1 Temperature", readingType: "Temperature", units: "Cel", context: "CPU", legacy: "Temperatures",
		upperCaution: 85, upperCritical: 95, value: temp(12, 48)},
	{id: "DIMM1Temp", name: "DIMM #1 Temperature", readingType: "Temperature", units: "Cel", context: "Memory", legacy: "Temperatures",
		upperCaution: 85, upperCritical: 95, value: temp(8, 22)},
	{id: "IntakeTemp", name: "Chassis Intake Temperature", readingType: "Temperature", units: "Cel", context: "Intake", legacy: "Temperatures",
		upperCaution: 35, upperCritical: 42, value: temp(0, 2)},
	{id: "ExhaustTemp", name: "Chassis Exhaust Temperature", readingType: "Temperature", units: "Cel", context: "Exhaust", legacy: "Temperatures",
		upperCaution: 60, upperCritical: 70, value: temp(4, 18)},
	{id: "CPUFan1", name: "CPU #1 Fan Speed", readingType: "Rotational", units: "RPM", context: "CPU", value: fanRPM(0, 2400, 7200)},
	{id: "CPUFan2", name: "CPU #2 Fan Speed", readingType: "Rotational", units: "RPM", context: "CPU", value: fanRPM(1, 2400, 7200)},
	{id: "FanBay1", name: "Fan Bay #1 Speed", readingType: "Rotational", units: "RPM", context: "Fan", value: fanRPM(2, 3000, 6000)},
	{id: "FanBay2", name: "Fan Bay #2 Speed", readingType: "Rotational", units: "RPM", context: "Fan", value: fanRPM(3, 3000, 6000)},
	{id: "TotalPower", name: "Total Power", readingType: "Power", units: "W", context: "Chassis", value: totalPower},
	{id: "CPU1Power", name: "CPU #1 Power", readingType: "Power", units: "W", context: "CPU", value: func(h hostState) float64 {
		if !h.on {
			return 0
		}
		return 18 + 200*h.load
	}},
	{id: "PS1InputPower", name: "Power Supply #1 Input Power", readingType: "Power", units: "W", context: "PowerSupply", value: psuInput(0)},
	{id: "PS2InputPower", name: "Power Supply #2 Input Power", readingType: "Power", units: "W", context: "PowerSupply", value: psuInput(1)},
	{id: "PS1InputVoltage", name: "Power Supply #1 Input Voltage", readingType: "Voltage", units: "V", context: "PowerSupply", legacy: "Voltages", value: psuVolts(0)},
	{id: "PS2InputVoltage", name: "Power Supply #2 Input Voltage", readingType: "Voltage", units: "V", context: "PowerSupply", legacy: "Voltages", value: psuVolts(1)},
}

func sensorByID(id string) (sensorDef, bool) {
	for _, s := range liveSensors {
		if s.id == id {
			return s, true
		}
	}
	return sensorDef{}, false
}

// Part kinds for SetPartHealth.
const (
	PartPSU = "psu"
	PartFan = "fan"
)

// part is a power supply or fan with its identity and health.
type part struct {
	kind, id, name, label    string
	manufacturer, model      string
	partNumber, sparePart    string
	serial, firmware, sensor string // sensor: the Sensors Id of its reading
	health                   string // OK, Warning, Critical
}

func newParts(serialBase string) (psus, fans []*part) {
	for i, id := range []string{"Bay1", "Bay2"} {
		psus = append(psus, &part{kind: PartPSU, id: id, name: fmt.Sprintf("Power Supply Bay %d", i+1), label: fmt.Sprintf("PSU %d", i+1),
			manufacturer: "Contoso Power", model: "RKS-440DC", partNumber: "23456-133", sparePart: "93284-133",
			serial: fmt.Sprintf("%s-PSU%d", serialBase, i+1), firmware: "1.00", sensor: fmt.Sprintf("PS%dInputPower", i+1), health: "OK"})
	}
	for i, f := range []struct{ id, name, label, sensor string }{
		{"CPU1", "Fan for CPU 1", "CPU #1 Fan", "CPUFan1"}, {"CPU2", "Fan for CPU 2", "CPU #2 Fan", "CPUFan2"},
		{"Bay1", "Chassis Fan Bay 1", "Fan Bay 1", "FanBay1"}, {"Bay2", "Chassis Fan Bay 2", "Fan Bay 2", "FanBay2"},
	} {
		fans = append(fans, &part{kind: PartFan, id: f.id, name: f.name, label: f.label,
			manufacturer: "Contoso Fans", model: "RKS-440DC", partNumber: "23456-133", sparePart: "93284-133",
			serial: fmt.Sprintf("%s-FAN%d", serialBase, i+1), sensor: f.sensor, health: "OK"})
	}
	return psus, fans
}

// sensorState is the live part of the sensor model, guarded by BMC.mu.
type sensorState struct {
	last      time.Time // last model update
	load      float64
	heat      float64
	lastCPU   time.Duration
	lastCPUAt time.Time
	forced    *float64           // SetLoad
	pinned    map[string]float64 // SetSensor
	psus      []*part
	fans      []*part
}

// SetLoad pins the host load the sensors follow (0..1, e.g. a test's
// "the guest is busy"); a negative load follows the machine again.
func (b *BMC) SetLoad(load float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if load < 0 || math.IsNaN(load) {
		b.sens.forced = nil
		return
	}
	l := min(load, 1)
	b.sens.forced = &l
}

// SetSensor pins a sensor's reading (its Sensors Id, e.g. "CPU1Temp")
// until ClearSensor: a test's way to make a reading cross a threshold.
func (b *BMC) SetSensor(id string, reading float64) error {
	if _, ok := sensorByID(id); !ok {
		return fmt.Errorf("vbmc %s: no sensor %q (have %s)", b.cfg.Name, id, strings.Join(sensorIDs(), ", "))
	}
	if math.IsNaN(reading) || math.IsInf(reading, 0) {
		return fmt.Errorf("vbmc %s: sensor %s: reading %v is not a number", b.cfg.Name, id, reading)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sens.pinned == nil {
		b.sens.pinned = map[string]float64{}
	}
	b.sens.pinned[id] = reading
	return nil
}

// ClearSensor makes a pinned sensor follow the host again.
func (b *BMC) ClearSensor(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sens.pinned, id)
}

func sensorIDs() []string {
	var ids []string
	for _, s := range liveSensors {
		ids = append(ids, s.id)
	}
	return ids
}

// Readings are every live sensor's reading now, by Sensors Id.
func (b *BMC) Readings() map[string]float64 {
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]float64{}
	for _, s := range liveSensors {
		out[s.id] = b.readingLocked(s, h)
	}
	return out
}

// SetPartHealth sets a power supply's or fan's health (OK, Warning,
// Critical) by its Id ("Bay1", "CPU1") and logs the change in the event
// log as the BMC would: a Critical PSU draws nothing, a Critical fan stops.
func (b *BMC) SetPartHealth(kind, id, health, message string) error {
	switch health {
	case "OK", "Warning", "Critical":
	default:
		return fmt.Errorf("vbmc %s: health %q: want OK, Warning or Critical", b.cfg.Name, health)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var parts []*part
	var sensorType, registry string
	switch kind {
	case PartPSU:
		parts, sensorType, registry = b.sens.psus, "Power Supply / Converter", "Power.1.0.PowerSupply"
	case PartFan:
		parts, sensorType, registry = b.sens.fans, "Fan", "VBMC.1.0.Fan"
	default:
		return fmt.Errorf("vbmc %s: part kind %q: want %s or %s", b.cfg.Name, kind, PartPSU, PartFan)
	}
	for _, p := range parts {
		if p.id != id {
			continue
		}
		p.health = health
		b.gen++
		if message == "" {
			message = fmt.Sprintf("%s '%s' health is %s.", map[string]string{PartPSU: "Power supply", PartFan: "Fan"}[kind], p.label, health)
		}
		suffix := map[string]string{"OK": "OK", "Warning": "Warning", "Critical": "Failed"}[health]
		b.logLocked(Event{Severity: health, Message: message, MessageID: registry + suffix, MessageArgs: []string{p.label},
			SensorType: sensorType, EntryCode: map[bool]string{true: "Deassert", false: "Assert"}[health == "OK"],
			Origin: b.partURL(p)})
		return nil
	}
	return fmt.Errorf("vbmc %s: no %s %q", b.cfg.Name, kind, id)
}

func (b *BMC) partURL(p *part) string {
	if p.kind == PartPSU {
		return powerSuppliesURL + "/" + p.id
	}
	return fansURL + "/" + p.id
}

// readHost advances the sensor model to now and returns the host state.
// The machine is asked for its CPU time before mu is taken (mu is never
// held across a Machine call).
func (b *BMC) readHost() hostState {
	var used time.Duration
	var cpus int
	var cpuOK bool
	if ct, ok := b.m.(CPUTimer); ok {
		used, cpus, cpuOK = ct.CPUTime()
	}
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &b.sens
	on := b.power == PowerOn
	// Utilisation over at least a second: a poll reads several resources
	// within milliseconds, and CPU time moves in clock ticks.
	switch {
	case !cpuOK || cpus <= 0:
		s.lastCPUAt = time.Time{}
	case s.lastCPUAt.IsZero() || used < s.lastCPU:
		s.lastCPU, s.lastCPUAt = used, now // a new QEMU process: new baseline
	case now.Sub(s.lastCPUAt) >= time.Second:
		s.load = float64(used-s.lastCPU) / float64(now.Sub(s.lastCPUAt)) / float64(cpus)
		s.lastCPU, s.lastCPUAt = used, now
	}
	load := s.load
	if !on {
		load = 0
	}
	if s.forced != nil {
		load = *s.forced
	}
	load = min(max(load, 0), 1)
	if !s.last.IsZero() && now.After(s.last) {
		alpha := 1 - math.Exp(-float64(now.Sub(s.last))/float64(b.cfg.ThermalTau))
		s.heat += (load - s.heat) * alpha
	}
	s.last = now
	h := hostState{on: on, load: load, heat: s.heat}
	for _, p := range s.psus {
		h.psuOK = append(h.psuOK, p.health != "Critical")
	}
	for _, p := range s.fans {
		h.fanOK = append(h.fanOK, p.health != "Critical")
	}
	return h
}

// readingLocked is s's reading: pinned, else the model's, rounded as BMCs
// report (whole degrees and RPM, watts to one decimal).
func (b *BMC) readingLocked(s sensorDef, h hostState) float64 {
	if v, ok := b.sens.pinned[s.id]; ok {
		return v
	}
	v := s.value(h)
	switch s.units {
	case "Cel", "RPM":
		return math.Round(v)
	}
	return math.Round(v*10) / 10
}

// sensorHealth judges a reading against the sensor's thresholds.
func sensorHealth(s sensorDef, v float64) string {
	switch {
	case s.upperCritical > 0 && v >= s.upperCritical:
		return "Critical"
	case s.upperCaution > 0 && v >= s.upperCaution:
		return "Warning"
	}
	return "OK"
}

func status(health string) map[string]any {
	return map[string]any{"State": "Enabled", "Health": health}
}

func (b *BMC) sensorBody(s sensorDef, v float64) map[string]any {
	obj := map[string]any{
		"@odata.type":     "#Sensor.v1_9_0.Sensor",
		"@odata.id":       sensorsURL + "/" + s.id,
		"Id":              s.id,
		"Name":            s.name,
		"ReadingType":     s.readingType,
		"ReadingUnits":    s.units,
		"Reading":         v,
		"PhysicalContext": s.context,
		"Status":          status(sensorHealth(s, v)),
	}
	th := map[string]any{}
	if s.upperCaution > 0 {
		th["UpperCaution"] = map[string]any{"Reading": s.upperCaution}
	}
	if s.upperCritical > 0 {
		th["UpperCritical"] = map[string]any{"Reading": s.upperCritical}
	}
	if len(th) > 0 {
		obj["Thresholds"] = th
	}
	return obj
}

// sensorsCollection is the Sensors collection, its members expanded when
// the client asked for $expand (and the BMC implements it).
func (b *BMC) sensorsCollection(expand bool) map[string]any {
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	var members []any
	for _, s := range liveSensors {
		if expand {
			members = append(members, b.sensorBody(s, b.readingLocked(s, h)))
		} else {
			members = append(members, map[string]any{"@odata.id": sensorsURL + "/" + s.id})
		}
	}
	return map[string]any{
		"@odata.type":         "#SensorCollection.SensorCollection",
		"@odata.id":           sensorsURL,
		"Name":                "Chassis sensors",
		"Members@odata.count": len(members),
		"Members":             members,
	}
}

func (b *BMC) sensor(id string) (map[string]any, bool) {
	s, ok := sensorByID(id)
	if !ok {
		return nil, false
	}
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sensorBody(s, b.readingLocked(s, h)), true
}

func identity(obj map[string]any, p *part) map[string]any {
	obj["Manufacturer"] = p.manufacturer
	obj["Model"] = p.model
	obj["PartNumber"] = p.partNumber
	obj["SparePartNumber"] = p.sparePart
	obj["SerialNumber"] = p.serial
	if p.firmware != "" {
		obj["FirmwareVersion"] = p.firmware
	}
	return obj
}

// thermalBody is the legacy Thermal resource: temperatures and fans.
func (b *BMC) thermalBody() map[string]any {
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	temps := []any{}
	for _, s := range liveSensors {
		if s.legacy != "Temperatures" {
			continue
		}
		v := b.readingLocked(s, h)
		i := len(temps)
		t := map[string]any{
			"@odata.id": fmt.Sprintf("%s#/Temperatures/%d", thermalURL, i), "MemberId": strconv.Itoa(i),
			"Name": s.name, "ReadingCelsius": v, "PhysicalContext": s.context, "Status": status(sensorHealth(s, v)),
		}
		if s.upperCaution > 0 {
			t["UpperThresholdNonCritical"] = s.upperCaution
		}
		if s.upperCritical > 0 {
			t["UpperThresholdCritical"] = s.upperCritical
		}
		temps = append(temps, t)
	}
	fans := []any{}
	for i, p := range b.sens.fans {
		s, _ := sensorByID(p.sensor)
		fans = append(fans, identity(map[string]any{
			"@odata.id": fmt.Sprintf("%s#/Fans/%d", thermalURL, i), "MemberId": strconv.Itoa(i),
			"Name": p.label, "Reading": b.readingLocked(s, h), "ReadingUnits": "RPM", "PhysicalContext": s.context,
			"Status": status(p.health),
		}, p))
	}
	return map[string]any{
		"@odata.type": "#Thermal.v1_7_3.Thermal", "@odata.id": thermalURL, "Id": "Thermal", "Name": "Thermal",
		"Temperatures": temps, "Fans": fans,
	}
}

// powerBody is the legacy Power resource: consumption, voltages and supplies.
func (b *BMC) powerBody() map[string]any {
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	total, _ := sensorByID("TotalPower")
	volts := []any{}
	for _, s := range liveSensors {
		if s.legacy != "Voltages" {
			continue
		}
		i := len(volts)
		volts = append(volts, map[string]any{
			"@odata.id": fmt.Sprintf("%s#/Voltages/%d", powerURL, i), "MemberId": strconv.Itoa(i),
			"Name": s.name, "ReadingVolts": b.readingLocked(s, h), "PhysicalContext": s.context, "Status": status("OK"),
		})
	}
	psus := []any{}
	for i, p := range b.sens.psus {
		in, _ := sensorByID(p.sensor)
		w := b.readingLocked(in, h)
		psus = append(psus, identity(map[string]any{
			"@odata.id": fmt.Sprintf("%s#/PowerSupplies/%d", powerURL, i), "MemberId": strconv.Itoa(i),
			"Name": p.label, "PowerSupplyType": "AC", "PowerCapacityWatts": 800,
			"PowerInputWatts": w, "LastPowerOutputWatts": math.Round(w*0.94*10) / 10,
			"Status": status(p.health),
		}, p))
	}
	return map[string]any{
		"@odata.type": "#Power.v1_7_3.Power", "@odata.id": powerURL, "Id": "Power", "Name": "Power",
		"PowerControl": []any{map[string]any{
			"@odata.id": powerURL + "#/PowerControl/0", "MemberId": "0", "Name": "System Input Power",
			"PowerConsumedWatts": b.readingLocked(total, h), "PowerCapacityWatts": 800, "Status": status("OK"),
		}},
		"Voltages":      volts,
		"PowerSupplies": psus,
	}
}

func (b *BMC) partCollection(url, name string, parts []*part) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	members := []any{}
	for _, p := range parts {
		members = append(members, map[string]any{"@odata.id": url + "/" + p.id})
	}
	return map[string]any{"@odata.type": "#" + name + "Collection." + name + "Collection", "@odata.id": url,
		"Name": name + " Collection", "Members@odata.count": len(members), "Members": members}
}

func (b *BMC) partBody(kind, id string) (map[string]any, bool) {
	h := b.readHost()
	b.mu.Lock()
	defer b.mu.Unlock()
	parts := b.sens.fans
	if kind == PartPSU {
		parts = b.sens.psus
	}
	for _, p := range parts {
		if p.id != id {
			continue
		}
		s, _ := sensorByID(p.sensor)
		v := b.readingLocked(s, h)
		obj := identity(map[string]any{
			"@odata.id": b.partURL(p), "Id": p.id, "Name": p.name, "Status": status(p.health),
			"Location": map[string]any{"PartLocation": map[string]any{"ServiceLabel": p.label, "LocationType": "Bay"}},
		}, p)
		if kind == PartPSU {
			obj["@odata.type"] = "#PowerSupply.v1_5_0.PowerSupply"
			obj["PowerCapacityWatts"] = 800
		} else {
			obj["@odata.type"] = "#Fan.v1_4_0.Fan"
			obj["SpeedPercent"] = map[string]any{"Reading": math.Round(v / 96), "SpeedRPM": v, "DataSourceUri": sensorsURL + "/" + s.id}
		}
		return obj, true
	}
	return nil, false
}

// CPUTime reads the QEMU process's user and system time from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks: USER_HZ is 100 on
// every Linux).
func (q *QEMUMachine) CPUTime() (time.Duration, int, bool) {
	q.mu.Lock()
	r := q.cur
	q.mu.Unlock()
	if r == nil || r.cmd.Process == nil {
		return 0, 0, false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0, 0, false
	}
	used, err := parseProcStatCPU(string(raw))
	if err != nil {
		return 0, 0, false
	}
	return used, q.cfg.CPUs, true
}

// parseProcStatCPU reads utime+stime from a /proc/<pid>/stat line. The
// command name (field 2) may hold spaces and parentheses: fields are
// counted after its last ')'.
func parseProcStatCPU(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command field in %q", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("proc stat: CPU time %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
