package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/stmcginnis/gofish"
)

// Where sensor readings come from: the Sensors collection (Redfish
// 2019.4+), or the Thermal and Power resources older BMCs have (deprecated
// since 2020.4). A chassis offering the collection is read through it, as
// DMTF's own tools do; the others through Thermal and Power.
const (
	SensorSourceSensors = "Sensors"
	SensorSourceLegacy  = "Thermal/Power"
)

// Bounds on what one read takes from a BMC.
const (
	maxChassis     = 4   // chassis read per call (the system's own first)
	maxSensors     = 256 // readings per call
	maxParts       = 64  // PSUs or fans per call
	maxTextLen     = 256 // a name, model, serial...
	maxMessageLen  = 1024
	maxUnitsLen    = 16
	sensorKeyLimit = 160
)

// SensorReading is one numeric sensor as the BMC reports it.
type SensorReading struct {
	// Key names the sensor stably on its BMC: "Sensors/CPU1Temp",
	// "Temperatures/CPU1 Temp"; prefixed by the chassis Id when more than
	// one chassis is read.
	Key    string
	Name   string
	Kind   string // temperature, fan, power, voltage, current, energy, frequency, percent, other
	Value  float64
	Units  string // C, RPM, %, W, V, A, kWh, Hz, or the BMC's own (bounded)
	Health string // OK, Warning, Critical, or "" where not reported
}

// Sensors is one reading of a BMC's sensors.
type Sensors struct {
	Source   string // SensorSourceSensors or SensorSourceLegacy (the first chassis's)
	Readings []SensorReading
	// Skipped counts sensors without a usable reading (absent, not a
	// number) or beyond the bound.
	Skipped int
}

// Part is a replaceable part the BMC reports: a power supply or a fan.
type Part struct {
	ID, Name                      string
	Manufacturer, Model           string
	PartNumber, SparePartNumber   string
	SerialNumber, FirmwareVersion string
	Health, State                 string
	Location                      string // the service label: "PSU 1"
}

// chassisLinks are the health resources a Chassis links.
type chassisLinks struct {
	ID                               string
	Sensors, Thermal, Power          string
	ThermalSubsystem, PowerSubsystem string
}

type link struct {
	ID string `json:"@odata.id"`
}

// parseChassisLinks reads a Chassis resource's health links, each a path
// on the BMC ("" when absent).
func parseChassisLinks(raw []byte) (chassisLinks, error) {
	var doc struct {
		ID                                                        string `json:"Id"`
		Sensors, Thermal, Power, ThermalSubsystem, PowerSubsystem link
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return chassisLinks{}, fmt.Errorf("parse chassis: %w", err)
	}
	l := chassisLinks{ID: textsafe.BoundedLine(doc.ID, maxTextLen)}
	var err error
	for _, f := range []struct {
		name string
		in   string
		out  *string
	}{{"Sensors", doc.Sensors.ID, &l.Sensors}, {"Thermal", doc.Thermal.ID, &l.Thermal}, {"Power", doc.Power.ID, &l.Power},
		{"ThermalSubsystem", doc.ThermalSubsystem.ID, &l.ThermalSubsystem}, {"PowerSubsystem", doc.PowerSubsystem.ID, &l.PowerSubsystem}} {
		if *f.out, err = optPath(f.name, f.in); err != nil {
			return chassisLinks{}, err
		}
	}
	return l, nil
}

// chassis lists the chassis to read: those the system links (its own
// enclosure first), else the first of the collection; at most maxChassis.
func (c *Client) chassis(api *gofish.APIClient) ([]chassisLinks, error) {
	sysRaw, _, err := c.systemRaw(api)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Links struct{ Chassis []link }
	}
	var uris []string
	if json.Unmarshal(sysRaw, &doc) == nil {
		for _, l := range doc.Links.Chassis {
			if p, err := bmcPath(l.ID); err == nil && !slices.Contains(uris, p) {
				uris = append(uris, p)
			}
		}
	}
	if len(uris) == 0 {
		var root struct{ Chassis link }
		if _, err := getJSON(api, "/redfish/v1", &root); err != nil {
			return nil, err
		}
		if root.Chassis.ID == "" {
			return nil, fmt.Errorf("%w: the service root links no Chassis collection", ErrNotSupported)
		}
		coll, err := bmcPath(root.Chassis.ID)
		if err != nil {
			return nil, fmt.Errorf("Chassis collection: %w", err)
		}
		var raw json.RawMessage
		if _, err := getJSON(api, coll, &raw); err != nil {
			return nil, err
		}
		if uris, err = parseMembers(raw); err != nil {
			return nil, fmt.Errorf("Chassis %s: %w", coll, err)
		}
		uris = uris[:min(len(uris), 1)]
	}
	if len(uris) == 0 {
		return nil, fmt.Errorf("%w: the BMC lists no Chassis", ErrNotSupported)
	}
	var out []chassisLinks
	for _, u := range uris[:min(len(uris), maxChassis)] {
		var raw json.RawMessage
		if _, err := getJSON(api, u, &raw); err != nil {
			return nil, err
		}
		l, err := parseChassisLinks(raw)
		if err != nil {
			return nil, fmt.Errorf("Chassis %s: %w", u, err)
		}
		if l.ID == "" {
			l.ID = u[strings.LastIndexByte(u, '/')+1:]
		}
		out = append(out, l)
	}
	return out, nil
}

// Sensors reads the sensors of the system's chassis: the Sensors
// collection where the chassis offers it (members expanded in one request
// where the service root advertises $expand, else read one by one), Thermal
// and Power otherwise. ErrNotSupported: the BMC offers neither.
func (c *Client) Sensors(ctx context.Context) (*Sensors, error) {
	var chassis []chassisLinks
	if err := c.call(ctx, "find chassis", func(api *gofish.APIClient) (err error) {
		chassis, err = c.chassis(api)
		return err
	}); err != nil {
		return nil, err
	}
	out := &Sensors{}
	offered := false
	for _, ch := range chassis {
		prefix := ""
		if len(chassis) > 1 {
			prefix = ch.ID + "/"
		}
		var rs []SensorReading
		var skipped int
		var err error
		switch {
		case ch.Sensors != "":
			rs, skipped, err = c.sensorCollection(ctx, ch.Sensors)
			out.Source = cmpOr(out.Source, SensorSourceSensors)
		case ch.Thermal != "" || ch.Power != "":
			rs, skipped, err = c.legacySensors(ctx, ch)
			out.Source = cmpOr(out.Source, SensorSourceLegacy)
		default:
			continue
		}
		offered = true
		if err != nil {
			return nil, fmt.Errorf("chassis %s: %w", ch.ID, err)
		}
		out.Skipped += skipped
		for _, r := range rs {
			if len(out.Readings) >= maxSensors {
				out.Skipped++
				continue
			}
			r.Key = textsafe.Truncate(prefix+r.Key, sensorKeyLimit)
			out.Readings = append(out.Readings, r)
		}
	}
	if !offered {
		return nil, fmt.Errorf("redfish %s: %w: no chassis links Sensors, Thermal or Power", c.ep.URL, ErrNotSupported)
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// expandQuery is the query that expands a collection's members one level
// where the service root advertises it ("" where not).
func expandQuery(e gofish.Expand) string {
	switch {
	case !e.NoLinks:
		return ""
	case e.Levels:
		return "?$expand=.($levels=1)"
	}
	return "?$expand=."
}

func (c *Client) sensorCollection(ctx context.Context, uri string) ([]SensorReading, int, error) {
	var rs []SensorReading
	var pending []string
	skipped := 0
	err := c.call(ctx, "read Sensors", func(api *gofish.APIClient) error {
		var raw json.RawMessage
		if _, err := getJSON(api, uri+expandQuery(api.Service.ProtocolFeaturesSupported.ExpandQuery), &raw); err != nil {
			return err
		}
		var err error
		rs, pending, skipped, err = parseSensorCollection(raw)
		if err != nil {
			return fmt.Errorf("Sensors %s: %w", uri, err)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	// Members not expanded: one GET each, within the bound.
	for i, m := range pending {
		if len(rs) >= maxSensors {
			skipped += len(pending) - i
			break
		}
		var r SensorReading
		var ok bool
		err := c.call(ctx, "read sensor", func(api *gofish.APIClient) error {
			var raw json.RawMessage
			if _, err := getJSON(api, m, &raw); err != nil {
				return err
			}
			r, ok = parseSensor(raw)
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			skipped++
			continue
		}
		rs = append(rs, r)
	}
	return rs, skipped, nil
}

// sensorDoc is a Sensor resource (or an expanded collection member).
type sensorDoc struct {
	ID           string `json:"Id"`
	Name         string
	ODataID      string `json:"@odata.id"`
	Reading      *float64
	ReadingType  string
	ReadingUnits string
	Status       struct{ Health, State string }
}

// parseSensorCollection reads a Sensors collection: the readings of
// expanded members, and the links of members to read one by one. One bad
// member is skipped, not the collection.
func parseSensorCollection(raw []byte) (rs []SensorReading, pending []string, skipped int, err error) {
	var coll struct {
		Members []json.RawMessage
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &coll); err != nil {
			return nil, nil, 0, fmt.Errorf("parse collection: %w", err)
		}
	}
	if len(coll.Members) > maxMembers {
		return nil, nil, 0, fmt.Errorf("collection lists %d members (limit %d)", len(coll.Members), maxMembers)
	}
	for _, m := range coll.Members {
		var probe map[string]json.RawMessage
		if json.Unmarshal(m, &probe) != nil {
			skipped++
			continue
		}
		_, hasReading := probe["Reading"]
		_, hasType := probe["ReadingType"]
		if !hasReading && !hasType {
			var l link
			if json.Unmarshal(m, &l) != nil {
				skipped++
				continue
			}
			if p, err := bmcPath(l.ID); err == nil && len(pending) < maxSensors {
				pending = append(pending, p)
			} else {
				skipped++
			}
			continue
		}
		if r, ok := parseSensor(m); ok {
			rs = append(rs, r)
		} else {
			skipped++
		}
	}
	return rs, pending, skipped, nil
}

// parseSensor reads one Sensor; ok is false when it has no finite reading
// (absent, disabled, not a number).
func parseSensor(raw []byte) (SensorReading, bool) {
	var d sensorDoc
	if json.Unmarshal(raw, &d) != nil || d.Reading == nil || !finite(*d.Reading) || d.Status.State == "Absent" {
		return SensorReading{}, false
	}
	id := d.ID
	if id == "" {
		id = d.ODataID[strings.LastIndexByte(d.ODataID, '/')+1:]
	}
	if id == "" {
		id = d.Name
	}
	if id == "" {
		return SensorReading{}, false
	}
	kind, units := sensorKind(d.ReadingType, d.ReadingUnits)
	return SensorReading{
		Key: "Sensors/" + textsafe.BoundedLine(id, maxTextLen), Name: textsafe.BoundedLine(cmpOr(d.Name, id), maxTextLen),
		Kind: kind, Value: *d.Reading, Units: units, Health: health(d.Status.Health),
	}, true
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// sensorKind folds a Redfish ReadingType and its UCUM ReadingUnits into
// CURE's kind and unit names.
func sensorKind(readingType, units string) (kind, unit string) {
	switch readingType {
	case "Temperature":
		kind = "temperature"
	case "Rotational":
		kind = "fan"
	case "Power":
		kind = "power"
	case "Voltage":
		kind = "voltage"
	case "Current":
		kind = "current"
	case "EnergykWh", "EnergyJoules", "EnergyWh":
		kind = "energy"
	case "Frequency":
		kind = "frequency"
	case "Percent":
		kind = "percent"
	default:
		kind = "other"
	}
	return kind, unitName(units)
}

// unitName writes a UCUM unit the way CURE's series do.
func unitName(u string) string {
	switch u {
	case "Cel":
		return "C"
	case "RPM", "{rev}/min":
		return "RPM"
	case "%", "Percent":
		return "%"
	case "kW.h":
		return "kWh"
	case "W.h":
		return "Wh"
	}
	return textsafe.BoundedLine(u, maxUnitsLen)
}

// health keeps a Redfish Health value and drops anything else.
func health(h string) string {
	switch h {
	case "OK", "Warning", "Critical":
		return h
	}
	return ""
}

func (c *Client) legacySensors(ctx context.Context, ch chassisLinks) ([]SensorReading, int, error) {
	var rs []SensorReading
	skipped := 0
	for _, res := range []struct{ what, uri string }{{"Thermal", ch.Thermal}, {"Power", ch.Power}} {
		if res.uri == "" {
			continue
		}
		err := c.call(ctx, "read "+res.what, func(api *gofish.APIClient) error {
			var raw json.RawMessage
			if _, err := getJSON(api, res.uri, &raw); err != nil {
				return err
			}
			got, n, err := parseLegacySensors(raw)
			if err != nil {
				return fmt.Errorf("%s %s: %w", res.what, res.uri, err)
			}
			rs, skipped = append(rs, got...), skipped+n
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return rs, skipped, nil
}

// legacyReading is one member of a Thermal or Power array.
type legacyReading struct {
	MemberID                              string `json:"MemberId"`
	Name                                  string
	ReadingCelsius, ReadingVolts          *float64
	Reading                               *float64
	ReadingUnits                          string
	PowerConsumedWatts                    *float64
	PowerInputWatts, LastPowerOutputWatts *float64
	Status                                struct{ Health, State string }
}

// parseLegacySensors reads the readings of a Thermal or a Power resource:
// temperatures, fans, power consumed, voltages, and each supply's input
// and output power.
func parseLegacySensors(raw []byte) ([]SensorReading, int, error) {
	var doc struct {
		Temperatures, Fans, PowerControl, Voltages, PowerSupplies []legacyReading
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, 0, fmt.Errorf("parse: %w", err)
	}
	var out []SensorReading
	skipped := 0
	add := func(section string, m legacyReading, suffix, kind, units string, v *float64) {
		if v == nil || !finite(*v) || m.Status.State == "Absent" || len(out) >= maxSensors {
			skipped++
			return
		}
		name := textsafe.BoundedLine(cmpOr(m.Name, m.MemberID), maxTextLen)
		if name == "" {
			skipped++
			return
		}
		out = append(out, SensorReading{Key: section + "/" + name + suffix, Name: name + suffix, Kind: kind, Value: *v, Units: units, Health: health(m.Status.Health)})
	}
	for _, m := range doc.Temperatures {
		add("Temperatures", m, "", "temperature", "C", m.ReadingCelsius)
	}
	for _, m := range doc.Fans {
		u := unitName(cmpOr(m.ReadingUnits, "RPM"))
		add("Fans", m, "", map[bool]string{true: "percent", false: "fan"}[u == "%"], u, m.Reading)
	}
	for _, m := range doc.PowerControl {
		add("PowerControl", m, "", "power", "W", m.PowerConsumedWatts)
	}
	for _, m := range doc.Voltages {
		add("Voltages", m, "", "voltage", "V", m.ReadingVolts)
	}
	for _, m := range doc.PowerSupplies {
		if m.PowerInputWatts != nil {
			add("PowerSupplies", m, " input", "power", "W", m.PowerInputWatts)
		}
		if m.LastPowerOutputWatts != nil {
			add("PowerSupplies", m, " output", "power", "W", m.LastPowerOutputWatts)
		}
	}
	return out, skipped, nil
}

// partDoc is a PowerSupply or Fan resource, or a member of the legacy
// Power.PowerSupplies and Thermal.Fans arrays.
type partDoc struct {
	ID                                             string `json:"Id"`
	MemberID                                       string `json:"MemberId"`
	Name, Manufacturer, Model, PartNumber          string
	SparePartNumber, SerialNumber, FirmwareVersion string
	Status                                         struct{ Health, State string }
	Location                                       struct {
		PartLocation struct{ ServiceLabel string }
	}
}

func (d partDoc) part() Part {
	l := func(s string) string { return textsafe.BoundedLine(s, maxTextLen) }
	return Part{
		ID: l(cmpOr(d.ID, d.MemberID)), Name: l(d.Name), Manufacturer: l(d.Manufacturer), Model: l(d.Model),
		PartNumber: l(d.PartNumber), SparePartNumber: l(d.SparePartNumber), SerialNumber: l(d.SerialNumber),
		FirmwareVersion: l(d.FirmwareVersion), Health: health(d.Status.Health), State: l(d.Status.State),
		Location: l(d.Location.PartLocation.ServiceLabel),
	}
}

// parsePart reads one PowerSupply or Fan resource.
func parsePart(raw []byte) (Part, error) {
	var d partDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return Part{}, fmt.Errorf("parse: %w", err)
	}
	return d.part(), nil
}

// parseLegacyParts reads the array key (PowerSupplies, Fans) of a Power or
// Thermal resource; found is false where the resource has no such array.
func parseLegacyParts(raw []byte, key string) (parts []Part, found bool, err error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, false, fmt.Errorf("parse: %w", err)
	}
	arr, ok := doc[key]
	if !ok {
		return nil, false, nil
	}
	var ds []json.RawMessage
	if err := json.Unmarshal(arr, &ds); err != nil {
		return nil, true, fmt.Errorf("parse %s: %w", key, err)
	}
	for _, m := range ds {
		if len(parts) >= maxParts {
			break
		}
		var d partDoc
		if json.Unmarshal(m, &d) == nil {
			parts = append(parts, d.part())
		}
	}
	return parts, true, nil
}

// parseSubsystemLink reads the collection link key (PowerSupplies, Fans)
// of a PowerSubsystem or ThermalSubsystem.
func parseSubsystemLink(raw []byte, key string) (string, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", fmt.Errorf("parse: %w", err)
	}
	var l link
	if v, ok := doc[key]; ok {
		if err := json.Unmarshal(v, &l); err != nil {
			return "", fmt.Errorf("parse %s: %w", key, err)
		}
	}
	return optPath(key, l.ID)
}

// PowerSupplies lists the chassis's power supplies with their identity
// and health: PowerSubsystem's PowerSupplies where offered, else the Power
// resource's array. ErrNotSupported: the BMC offers neither.
func (c *Client) PowerSupplies(ctx context.Context) ([]Part, error) {
	return c.parts(ctx, "power supplies", func(ch chassisLinks) (string, string) { return ch.PowerSubsystem, ch.Power }, "PowerSupplies")
}

// Fans lists the chassis's fans with their identity and health:
// ThermalSubsystem's Fans where offered, else the Thermal resource's array.
// ErrNotSupported: the BMC offers neither.
func (c *Client) Fans(ctx context.Context) ([]Part, error) {
	return c.parts(ctx, "fans", func(ch chassisLinks) (string, string) { return ch.ThermalSubsystem, ch.Thermal }, "Fans")
}

func (c *Client) parts(ctx context.Context, what string, links func(chassisLinks) (subsystem, legacy string), key string) ([]Part, error) {
	var chassis []chassisLinks
	if err := c.call(ctx, "find chassis", func(api *gofish.APIClient) (err error) {
		chassis, err = c.chassis(api)
		return err
	}); err != nil {
		return nil, err
	}
	var out []Part
	offered := false
	for _, ch := range chassis {
		sub, legacy := links(ch)
		var members []string
		err := c.call(ctx, "read "+what, func(api *gofish.APIClient) error {
			if sub != "" {
				var raw json.RawMessage
				if _, err := getJSON(api, sub, &raw); err != nil {
					return err
				}
				coll, err := parseSubsystemLink(raw, key)
				if err != nil {
					return fmt.Errorf("%s: %w", sub, err)
				}
				if coll != "" {
					offered = true
					if _, err := getJSON(api, coll, &raw); err != nil {
						return err
					}
					if members, err = parseMembers(raw); err != nil {
						return fmt.Errorf("%s: %w", coll, err)
					}
					return nil
				}
			}
			if legacy == "" {
				return nil
			}
			var raw json.RawMessage
			if _, err := getJSON(api, legacy, &raw); err != nil {
				return err
			}
			ps, found, err := parseLegacyParts(raw, key)
			if err != nil {
				return fmt.Errorf("%s: %w", legacy, err)
			}
			offered = offered || found
			out = append(out, ps...)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, m := range members {
			if len(out) >= maxParts {
				break
			}
			err := c.call(ctx, "read "+what, func(api *gofish.APIClient) error {
				var raw json.RawMessage
				if _, err := getJSON(api, m, &raw); err != nil {
					return err
				}
				p, err := parsePart(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", m, err)
				}
				out = append(out, p)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if !offered {
		return nil, fmt.Errorf("redfish %s: %w: no chassis offers %s", c.ep.URL, ErrNotSupported, what)
	}
	return out[:min(len(out), maxParts)], nil
}

// IsNotSupported says whether err means the BMC does not offer what was
// asked (recorded as such, not a failure).
func IsNotSupported(err error) bool { return errors.Is(err, ErrNotSupported) }
