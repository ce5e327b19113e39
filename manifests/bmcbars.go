package manifests

import (
	"gopkg.in/yaml.v3"
)

// BMCBars are a suite's bars on what the BMC shows of a run (spec.bmc): the
// coordinator judges the evidence it reads from the BMC at the end of the
// validate phase (PSUs, fans, the event log of the run's window) and the
// sensors it polled during it. A failed bar is a FAIL verdict naming the
// part; evidence a bar needs and cannot have is an ERROR. An empty field
// takes its default (DefaultBMCBars): a suite relaxes a bar only by saying
// BMCIgnore.
type BMCBars struct {
	// PowerSupplies and Fans: BMCPartsOK (every part's health is OK; a
	// Warning or Critical part fails) or BMCIgnore.
	PowerSupplies string `yaml:"powerSupplies,omitempty"`
	Fans          string `yaml:"fans,omitempty"`
	// EventLog is the least severity of an entry in the run's window that
	// fails it: BMCSeverityCritical, BMCSeverityWarning, or BMCIgnore.
	EventLog string `yaml:"eventLog,omitempty"`
	// Sensors are limits on the readings polled during the validate phase.
	Sensors []SensorBar `yaml:"sensors,omitempty"`
}

// SensorBar is a limit on the sensors whose key (as the run's series name
// them, without "bmc/": "Sensors/CPU1Temp", "Temperatures/CPU1 Temp")
// matches Match, a glob: every reading must lie within [Min, Max].
type SensorBar struct {
	Match string   `yaml:"match"`
	Min   *float64 `yaml:"min,omitempty"`
	Max   *float64 `yaml:"max,omitempty"`
}

// Values of the BMC bars.
const (
	BMCPartsOK          = "ok"
	BMCIgnore           = "ignore"
	BMCSeverityCritical = "Critical"
	BMCSeverityWarning  = "Warning"
)

// MaxSensorBars bounds a suite's sensor bars.
const MaxSensorBars = 64

// DefaultBMCBars are the bars of a diagnostic or burn-in whose suite names
// none (or leaves a field empty): every PSU and fan healthy, no Critical
// entry in the BMC's log during the run. A node with a failed PSU never
// passes acceptance by default.
func DefaultBMCBars() BMCBars {
	return BMCBars{PowerSupplies: BMCPartsOK, Fans: BMCPartsOK, EventLog: BMCSeverityCritical}
}

// Effective is the bars with the defaults filled in (b may be nil), and
// which of them the suite set itself (a bar the suite set fails closed even
// where the BMC offers no such resource; a default one is then not judged).
func (b *BMCBars) Effective() (eff BMCBars, explicit map[string]bool) {
	eff, explicit = DefaultBMCBars(), map[string]bool{}
	if b == nil {
		return eff, explicit
	}
	for _, f := range []struct {
		key      string
		set, dst *string
	}{{"powerSupplies", &b.PowerSupplies, &eff.PowerSupplies}, {"fans", &b.Fans, &eff.Fans}, {"eventLog", &b.EventLog, &eff.EventLog}} {
		if *f.set != "" {
			*f.dst, explicit[f.key] = *f.set, true
		}
	}
	eff.Sensors = b.Sensors
	return eff, explicit
}

// bmcBars reads spec.bmc.
func (d *decoder) bmcBars(n *yaml.Node, p string) *BMCBars {
	f := d.mapping(n, p, "powerSupplies", "fans", "eventLog", "sensors")
	b := &BMCBars{
		PowerSupplies: f.optEnum("powerSupplies", BMCPartsOK, BMCIgnore),
		Fans:          f.optEnum("fans", BMCPartsOK, BMCIgnore),
		EventLog:      f.optEnum("eventLog", BMCSeverityCritical, BMCSeverityWarning, BMCIgnore),
	}
	items := f.seq("sensors", false)
	if len(items) > MaxSensorBars {
		d.errorf(f.vals["sensors"], join(p, "sensors"), "%d sensor bars, at most %d", len(items), MaxSensorBars)
		items = items[:MaxSensorBars]
	}
	for i, item := range items {
		b.Sensors = append(b.Sensors, d.sensorBar(item, index(join(p, "sensors"), i)))
	}
	return b
}

func (d *decoder) sensorBar(n *yaml.Node, p string) SensorBar {
	f := d.mapping(n, p, "match", "min", "max")
	var sb SensorBar
	var v *yaml.Node
	sb.Match, v = f.str("match", true)
	d.checkGlob(v, join(p, "match"), sb.Match)
	for _, side := range []string{"min", "max"} {
		x := f.get(side)
		if x == nil {
			continue
		}
		if val, ok := d.number(x, join(p, side)); ok {
			if side == "min" {
				sb.Min = &val
			} else {
				sb.Max = &val
			}
		}
	}
	if sb.Min != nil && sb.Max != nil && *sb.Min > *sb.Max {
		d.errorf(f.vals["max"], join(p, "max"), "%v is below min %v", *sb.Max, *sb.Min)
	}
	if f.ok && !f.has("min") && !f.has("max") {
		d.errorf(n, p, "sensor bar sets no limit: set min, max or both")
	}
	return sb
}
