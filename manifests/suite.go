package manifests

import (
	"gopkg.in/yaml.v3"
)

var checkTypes = []string{CheckGPU, CheckMemory, CheckCPU, CheckNVMeSMART, CheckStorageThroughput, CheckEthernet, CheckInfiniBand, CheckThermal}

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
	spec := d.mapping(v, "spec", "duration", "failFast", "checks")
	s.Spec.Duration = spec.duration("duration")
	s.Spec.FailFast = spec.boolean("failFast")
	seen := map[string]int{}
	for i, item := range spec.seq("checks", true) {
		p := index("spec.checks", i)
		c := d.check(item, p)
		if c.Name != "" {
			if line, dup := seen[c.Name]; dup {
				d.errorf(item, join(p, "name"), "duplicate check name %q (first used on line %d)", c.Name, line)
			} else {
				seen[c.Name] = item.Line
			}
		}
		if s.Spec.Duration > 0 && c.Duration > s.Spec.Duration {
			d.errorf(item, join(p, "duration"), "%s is longer than the suite's duration %s", c.Duration, s.Spec.Duration)
		}
		s.Spec.Checks = append(s.Spec.Checks, c)
	}
	return s
}

func (d *decoder) check(n *yaml.Node, p string) Check {
	f := d.mapping(n, p, "name", "type", "appliesTo", "duration", "interval", "params", "thresholds")
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
	return c
}

// params: scalars or lists of scalars, nothing deeper — a check's knobs
// should read as a flat list.
func (d *decoder) params(n *yaml.Node, p string) map[string]any {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, p, "expected a mapping, found %s", describe(n))
		return nil
	}
	out := map[string]any{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		kp := join(p, k.Value)
		if _, dup := out[k.Value]; dup {
			d.errorf(k, kp, "duplicate key")
			continue
		}
		if v.Kind == yaml.SequenceNode {
			list := make([]any, 0, len(v.Content))
			for j, item := range v.Content {
				if x, ok := d.scalar(resolve(item), index(kp, j), true); ok {
					list = append(list, x)
				}
			}
			out[k.Value] = list
			continue
		}
		if x, ok := d.scalar(v, kp, true); ok {
			out[k.Value] = x
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (d *decoder) thresholds(n *yaml.Node, p string) map[string]Threshold {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, p, "expected a mapping of metric names to {min, max, equals}, found %s", describe(n))
		return nil
	}
	out := map[string]Threshold{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		kp := join(p, k.Value)
		if _, dup := out[k.Value]; dup {
			d.errorf(k, kp, "duplicate metric")
			continue
		}
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
