package manifests

import (
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var checkTypes = []string{CheckGPU, CheckMemory, CheckCPU, CheckNVMeSMART, CheckStorageThroughput, CheckEthernet, CheckInfiniBand, CheckThermal,
	CheckStorageRandom, CheckMemoryBandwidth, CheckCPUThroughput, CheckNICThroughput, CheckSite, CheckNodePair,
	CheckGPUBandwidth, CheckNCCLAllReduce}

// CheckTypes lists the check types a suite may name (the runner's check
// registry, tools/checks/suite, has one entry for each).
func CheckTypes() []string { return append([]string(nil), checkTypes...) }

// CheckTools names the tool-bundle program a check type runs ("" for the
// checks built into the runner).
func CheckTools(checkType string) string {
	switch checkType {
	case CheckStorageRandom:
		return "fio"
	case CheckMemoryBandwidth, CheckCPUThroughput:
		return "stress-ng"
	case CheckNICThroughput, CheckNodePair:
		return "iperf3" // a node-pair check over RDMA ports runs perftest too
	}
	return ""
}

// Tools lists, sorted, the tool-bundle programs the suite's checks run:
// when it is empty the runner needs no tool bundle.
func (s *ValidationSuite) Tools() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range s.Spec.Checks {
		if t := CheckTools(c.Type); t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

func (d *decoder) suite(top *fields) *ValidationSuite {
	s := &ValidationSuite{APIVersion: APIVersion, Kind: KindValidationSuite}
	if v := top.get("metadata"); v != nil {
		s.Metadata = d.metadata(v, "metadata")
	} else {
		top.missing("metadata")
	}
	v := top.get("spec")
	if v == nil {
		top.missing("spec")
		return s
	}
	spec := d.mapping(v, "spec", "duration", "grace", "failFast", "resume", "end", "fleet", "bmc", "stages", "checks")
	s.Spec.Duration = spec.duration("duration")
	s.Spec.Grace = spec.duration("grace")
	s.Spec.FailFast = spec.boolean("failFast")
	s.Spec.Resume = spec.optEnum("resume", ResumeContinue, ResumeRestart)
	s.Spec.End = spec.optEnum("end", EndHostOS, EndPowerOff, EndStay)
	if v := spec.get("fleet"); v != nil {
		s.Spec.Fleet = d.fleetPolicy(v, "spec.fleet")
	}
	if v := spec.get("bmc"); v != nil {
		s.Spec.BMC = d.bmcBars(v, "spec.bmc") // bmcbars.go
	}
	seen := map[string]int{}
	add := func(item *yaml.Node, p, stage string, stageDur Duration) {
		c := d.check(item, p)
		c.Stage = stage
		if c.Name != "" {
			if line, dup := seen[c.Name]; dup {
				d.errorf(item, join(p, "name"), "duplicate check name %q (first used on line %d)", c.Name, line)
			} else {
				seen[c.Name] = item.Line
			}
		}
		if stageDur > 0 && c.Duration > stageDur {
			d.errorf(item, join(p, "duration"), "%s is longer than its stage's duration %s", c.Duration, stageDur)
		}
		if s.Spec.Duration > 0 && c.Duration > s.Spec.Duration {
			d.errorf(item, join(p, "duration"), "%s is longer than the suite's duration %s", c.Duration, s.Spec.Duration)
		}
		if c.Program != nil {
			d.siteTimeout(item, join(p, "program.timeout"), c, stageDur, s.Spec.Duration)
		}
		s.Spec.Checks = append(s.Spec.Checks, c)
	}
	switch {
	case spec.has("stages") && spec.has("checks"):
		d.errorf(spec.vals["checks"], "spec.checks", "set either checks (one after another) or stages (checks grouped to run at once), not both")
	case spec.has("stages"):
		stageNames := map[string]int{}
		for i, item := range spec.seq("stages", true) {
			p := index("spec.stages", i)
			f := d.mapping(item, p, "name", "duration", "telemetry", "checks")
			var st Stage
			var nv *yaml.Node
			st.Name, nv = f.str("name", true)
			d.checkName(nv, join(p, "name"), st.Name)
			if line, dup := stageNames[st.Name]; dup && st.Name != "" {
				d.errorf(nv, join(p, "name"), "duplicate stage name %q (first used on line %d)", st.Name, line)
			} else if nv != nil {
				stageNames[st.Name] = nv.Line
			}
			st.Duration = f.duration("duration")
			if s.Spec.Duration > 0 && st.Duration > s.Spec.Duration {
				d.errorf(f.vals["duration"], join(p, "duration"), "%s is longer than the suite's duration %s", st.Duration, s.Spec.Duration)
			}
			if v := f.get("telemetry"); v != nil {
				st.Telemetry = d.telemetry(v, join(p, "telemetry"))
			}
			for j, c := range f.seq("checks", true) {
				n := len(s.Spec.Checks)
				add(c, index(join(p, "checks"), j), st.Name, st.Duration)
				if len(s.Spec.Checks) > n {
					st.Checks = append(st.Checks, s.Spec.Checks[n].Name)
				}
			}
			s.Spec.Stages = append(s.Spec.Stages, st)
		}
		if s.Spec.Duration > 0 {
			if planned := (&ValidationSuiteSpec{Stages: s.Spec.Stages, Checks: s.Spec.Checks}).Planned(); planned > time.Duration(s.Spec.Duration) {
				d.errorf(spec.vals["stages"], "spec.stages", "the stages add up to %s, longer than the suite's duration %s", planned, s.Spec.Duration)
			}
		}
	default:
		for i, item := range spec.seq("checks", true) {
			add(item, index("spec.checks", i), "", 0)
		}
	}
	return s
}

func (d *decoder) fleetPolicy(n *yaml.Node, p string) *FleetPolicy {
	f := d.mapping(n, p, "window", "minNodes")
	fp := &FleetPolicy{Window: f.duration("window")}
	if v := f.get("minNodes"); v != nil {
		if x, ok := d.integer(v, join(p, "minNodes")); ok {
			if x < 1 || x > 100000 {
				d.errorf(v, join(p, "minNodes"), "%d is out of range [1, 100000]", x)
			}
			fp.MinNodes = int(x)
		}
	}
	return fp
}

func (d *decoder) telemetry(n *yaml.Node, p string) *Telemetry {
	f := d.mapping(n, p, "interval", "bmcInterval", "thresholds")
	t := &Telemetry{Interval: f.duration("interval"), BMCInterval: f.duration("bmcInterval")}
	if v := f.get("thresholds"); v != nil {
		t.Thresholds = d.thresholds(v, join(p, "thresholds"))
	}
	return t
}

// bands: metric -> {below, above}, each a positive number of robust
// deviations.
func (d *decoder) bands(n *yaml.Node, p string) map[string]Band {
	out := map[string]Band{}
	if !d.entries(n, p, "a mapping of metric names to {below, above}", "duplicate metric", func(k, v *yaml.Node, kp string) {
		f := d.mapping(v, kp, "below", "above")
		var b Band
		for _, side := range []string{"below", "above"} {
			x := f.get(side)
			if x == nil {
				continue
			}
			val, ok := d.number(x, join(kp, side))
			if !ok {
				continue
			}
			if val <= 0 || val > 100 {
				d.errorf(x, join(kp, side), "%v robust deviations is out of range (0, 100]", val)
				continue
			}
			if side == "below" {
				b.Below = &val
			} else {
				b.Above = &val
			}
		}
		if f.ok && f.count() == 0 {
			d.errorf(v, kp, "band is empty: set below, above or both (robust deviations from the fleet median)")
		}
		out[k.Value] = b
	}) {
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (d *decoder) check(n *yaml.Node, p string) Check {
	f := d.mapping(n, p, "name", "type", "appliesTo", "duration", "interval", "params", "thresholds", "fleet", "program", "optional")
	var c Check
	var v *yaml.Node
	c.Name, v = f.str("name", true)
	d.checkName(v, join(p, "name"), c.Name)
	c.Type = f.enum("type", "", checkTypes...)
	c.AppliesTo, v = f.str("appliesTo", false)
	d.checkGlob(v, join(p, "appliesTo"), c.AppliesTo)
	c.Duration = f.duration("duration")
	c.Interval = f.duration("interval")
	if c.Duration > 0 && c.Interval > c.Duration {
		d.errorf(f.vals["interval"], join(p, "interval"), "%s is longer than the check's duration %s", c.Interval, c.Duration)
	}
	if v := f.get("params"); v != nil {
		c.Params = d.params(v, join(p, "params"))
	}
	if v := f.get("thresholds"); v != nil {
		c.Thresholds = d.thresholds(v, join(p, "thresholds"))
	}
	if v := f.get("fleet"); v != nil {
		c.Fleet = d.bands(v, join(p, "fleet"))
	}
	switch v := f.get("program"); {
	case v != nil && c.Type != CheckSite:
		d.errorf(v, join(p, "program"), "only a %s check runs a program (this check is type %s)", CheckSite, c.Type)
	case v != nil:
		c.Program = d.siteProgram(v, join(p, "program"))
	case c.Type == CheckSite:
		f.missing("program")
	}
	if v, set := f.vals["optional"]; set {
		c.Optional = d.optional(v, join(p, "optional"))
	}
	return c
}

// optional reads a check's optional: {reason: "..."}. A bare optional (true,
// a string, null or an empty reason) is refused: a check that may test
// nothing must say why, since the report shows it in place of a result.
func (d *decoder) optional(n *yaml.Node, p string) *Optional {
	const want = `expected {reason: "why this check may test nothing here"}`
	if isNull(n) || n.Kind != yaml.MappingNode {
		d.errorf(n, p, "%s, found %s", want, describe(n))
		return nil
	}
	f := d.mapping(n, p, "reason")
	v := f.get("reason")
	if v == nil {
		d.errorf(n, join(p, "reason"), "required field is missing: an optional check must say why it may test nothing (%s)", want)
		return nil
	}
	reason, ok := d.scalarString(v, join(p, "reason"))
	if !ok {
		return nil
	}
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		d.errorf(v, join(p, "reason"), "must not be empty: say why this check may test nothing")
		return nil
	case len(reason) > 256 || strings.ContainsAny(reason, "\x00\r\n"):
		d.errorf(v, join(p, "reason"), "one line of at most 256 bytes (found %d bytes)", len(reason))
		return nil
	}
	return &Optional{Reason: reason}
}

// siteProgram reads a site check's program: the artifact's pin and what it
// tests.
func (d *decoder) siteProgram(n *yaml.Node, p string) *SiteProgram {
	f := d.mapping(n, p, "url", "sha256", "size", "description", "timeout", "network")
	sp := &SiteProgram{}
	var v *yaml.Node
	sp.URL, v = f.str("url", false)
	d.checkURL(v, join(p, "url"), sp.URL)
	sp.SHA256, v = f.str("sha256", true)
	if v != nil && sp.SHA256 != "" && !sha256RE.MatchString(sp.SHA256) {
		d.errorf(v, join(p, "sha256"), "%q is not a sha256 (want 64 lowercase hex digits, found %d characters)", sp.SHA256, len(sp.SHA256))
	}
	if v := f.get("size"); v != nil {
		if x, ok := d.integer(v, join(p, "size")); ok {
			if x <= 0 || x > MaxSiteProgram {
				d.errorf(v, join(p, "size"), "%d bytes is out of range [1, %d]", x, MaxSiteProgram)
			}
			sp.Size = x
		}
	} else {
		f.missing("size")
	}
	sp.Description, v = f.str("description", true)
	if v != nil && (len(sp.Description) > 1024 || strings.ContainsAny(sp.Description, "\x00\r")) {
		d.errorf(v, join(p, "description"), "one paragraph of at most 1024 bytes, saying what the program tests")
	}
	sp.Timeout = f.duration("timeout")
	sp.Network, v = f.str("network", false)
	switch sp.Network {
	case "":
		sp.Network = SiteNetworkNone
	case SiteNetworkNone, SiteNetworkNode:
	default:
		d.errorf(v, join(p, "network"), "%q is not a site program's network (want %s, the default, or %s)", sp.Network, SiteNetworkNone, SiteNetworkNode)
	}
	return sp
}

// siteTimeout checks a site program's time limit against the check's,
// its stage's and the suite's durations: the program may not be given
// longer than the check runs.
func (d *decoder) siteTimeout(n *yaml.Node, p string, c Check, stageDur, suiteDur Duration) {
	t := c.Program.Timeout
	for _, b := range []struct {
		what string
		dur  Duration
	}{{"the check's duration", c.Duration}, {"its stage's duration", stageDur}, {"the suite's duration", suiteDur}} {
		if t > 0 && b.dur > 0 && t > b.dur {
			d.errorf(n, p, "%s is longer than %s %s", t, b.what, b.dur)
			return
		}
	}
}

// params: scalars or lists of scalars, nothing deeper — a check's knobs
// should read as a flat list.
func (d *decoder) params(n *yaml.Node, p string) map[string]any {
	out := map[string]any{}
	if !d.entries(n, p, "a mapping", "duplicate key", func(k, v *yaml.Node, kp string) {
		if v.Kind == yaml.SequenceNode {
			list := make([]any, 0, len(v.Content))
			for j, item := range v.Content {
				if x, ok := d.scalar(resolve(item), index(kp, j), true); ok {
					list = append(list, x)
				}
			}
			out[k.Value] = list
			return
		}
		if x, ok := d.scalar(v, kp, true); ok {
			out[k.Value] = x
		}
	}) {
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (d *decoder) thresholds(n *yaml.Node, p string) map[string]Threshold {
	out := map[string]Threshold{}
	if !d.entries(n, p, "a mapping of metric names to {min, max, equals}", "duplicate metric", func(k, v *yaml.Node, kp string) {
		f := d.mapping(v, kp, "min", "max", "equals")
		var t Threshold
		if v := f.get("min"); v != nil {
			if x, ok := d.number(v, join(kp, "min")); ok {
				t.Min = &x
			}
		}
		if v := f.get("max"); v != nil {
			if x, ok := d.number(v, join(kp, "max")); ok {
				t.Max = &x
			}
		}
		if v := f.get("equals"); v != nil {
			if x, ok := d.scalar(v, join(kp, "equals"), true); ok {
				t.Equals = x
			}
			if f.has("min") || f.has("max") {
				d.errorf(v, join(kp, "equals"), "cannot be combined with min or max")
			}
		}
		if t.Min != nil && t.Max != nil && *t.Min > *t.Max {
			d.errorf(f.vals["max"], join(kp, "max"), "%v is below min %v", *t.Max, *t.Min)
		}
		if f.ok && f.count() == 0 {
			d.errorf(v, kp, "threshold is empty: set min, max or equals")
		}
		out[k.Value] = t
	}) {
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// MarshalYAML keeps float params floats on the way out ("90.0", not "90").
func (c Check) MarshalYAML() (any, error) {
	type plain Check // no MarshalYAML: avoids recursion
	p := plain(c)
	if c.Params != nil {
		p.Params = make(map[string]any, len(c.Params))
		for k, v := range c.Params {
			p.Params[k] = floatNodes(v)
		}
	}
	return p, nil
}

// MarshalYAML keeps a float Equals a float on the way out.
func (t Threshold) MarshalYAML() (any, error) {
	type plain Threshold
	p := plain(t)
	p.Equals = floatNodes(t.Equals)
	return p, nil
}

func floatNodes(v any) any {
	switch x := v.(type) {
	case float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: formatFloat(x)}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = floatNodes(e)
		}
		return out
	}
	return v
}

// MarshalYAML writes a staged suite back as stages with their checks
// nested, as it was read.
func (s ValidationSuiteSpec) MarshalYAML() (any, error) {
	type plain ValidationSuiteSpec // no MarshalYAML: avoids recursion
	if len(s.Stages) == 0 {
		return plain(s), nil
	}
	type stageOut struct {
		Name      string     `yaml:"name"`
		Duration  Duration   `yaml:"duration,omitempty"`
		Telemetry *Telemetry `yaml:"telemetry,omitempty"`
		Checks    []Check    `yaml:"checks"`
	}
	type specOut struct {
		Duration Duration     `yaml:"duration,omitempty"`
		Grace    Duration     `yaml:"grace,omitempty"`
		FailFast bool         `yaml:"failFast,omitempty"`
		Resume   string       `yaml:"resume,omitempty"`
		End      string       `yaml:"end,omitempty"`
		Fleet    *FleetPolicy `yaml:"fleet,omitempty"`
		BMC      *BMCBars     `yaml:"bmc,omitempty"`
		Stages   []stageOut   `yaml:"stages"`
	}
	out := specOut{Duration: s.Duration, Grace: s.Grace, FailFast: s.FailFast, Resume: s.Resume, End: s.End, Fleet: s.Fleet, BMC: s.BMC}
	for _, st := range s.Stages {
		so := stageOut{Name: st.Name, Duration: st.Duration, Telemetry: st.Telemetry}
		for _, c := range s.Checks {
			if c.Stage == st.Name {
				so.Checks = append(so.Checks, c)
			}
		}
		out.Stages = append(out.Stages, so)
	}
	return out, nil
}

// entries walks a mapping whose keys are free (metric and param names),
// reporting a value that is not a mapping and repeated keys; fn sees each
// key's first occurrence with its path. It reports whether n was a mapping.
func (d *decoder) entries(n *yaml.Node, p, want, dupMsg string, fn func(k, v *yaml.Node, kp string)) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, p, "expected %s, found %s", want, describe(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		kp := join(p, k.Value)
		if seen[k.Value] {
			d.errorf(k, kp, "%s", dupMsg)
			continue
		}
		seen[k.Value] = true
		fn(k, v, kp)
	}
	return true
}
