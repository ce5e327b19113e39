package suite

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
)

// params reads one check's params and thresholds, remembering which keys
// were used so unknown ones become errors (a misspelt bar must not pass
// silently).
type params struct {
	where string // spec.checks[2] (name)
	p     map[string]any
	th    map[string]manifests.Threshold
	usedP map[string]bool
	usedT map[string]bool
	// spec is the check type's declaration (nil: unregistered type);
	// read is the kind each param was read as, for the registry's test.
	spec *Spec
	read map[string]Kind
	errs []string
}

func newParams(i int, c manifests.Check) *params {
	return &params{
		where: fmt.Sprintf("spec.checks[%d] (%s, type %s)", i, c.Name, c.Type),
		p:     c.Params, th: c.Thresholds,
		usedP: map[string]bool{}, usedT: map[string]bool{},
		spec: registry[c.Type], read: map[string]Kind{},
	}
}

func (p *params) errorf(field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("%s: %s: %s", p.where, field, fmt.Sprintf(format, args...)))
}

func (p *params) get(key string) (any, bool) {
	p.usedP[key] = true
	v, ok := p.p[key]
	return v, ok
}

// getAs is get for a param read as kind k.
func (p *params) getAs(key string, k Kind) (any, bool) {
	p.read[key] = k
	return p.get(key)
}

func (p *params) float(key string, def float64) float64 {
	v, ok := p.getAs(key, KindFloat)
	if !ok {
		return def
	}
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	p.errorf("params."+key, "expected a number, found %T %v", v, v)
	return def
}

func (p *params) int(key string, def int64) int64 {
	v, ok := p.getAs(key, KindInt)
	if !ok {
		return def
	}
	if x, ok := v.(int64); ok {
		return x
	}
	p.errorf("params."+key, "expected an integer, found %T %v", v, v)
	return def
}

func (p *params) bool(key string) bool {
	v, ok := p.getAs(key, KindBool)
	if !ok {
		return false
	}
	if b, ok := v.(bool); ok {
		return b
	}
	p.errorf("params."+key, "expected true or false, found %T %v", v, v)
	return false
}

func (p *params) str(key string) string {
	v, ok := p.getAs(key, KindString)
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	p.errorf("params."+key, "expected a string, found %T %v", v, v)
	return ""
}

func (p *params) strs(key string) []string {
	v, ok := p.getAs(key, KindStrings)
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		if s, ok := v.(string); ok {
			return []string{s}
		}
		p.errorf("params."+key, "expected a list of strings, found %T %v", v, v)
		return nil
	}
	var out []string
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			p.errorf(fmt.Sprintf("params.%s[%d]", key, i), "expected a string, found %T %v", e, e)
			continue
		}
		out = append(out, s)
	}
	return out
}

// size reads a byte count: an integer or a string such as "4GiB".
func (p *params) size(key string) uint64 {
	v, ok := p.getAs(key, KindSize)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x)
		}
	case string:
		b, err := manifests.ParseByteSize(x)
		if err == nil && b >= 0 {
			return uint64(b)
		}
		p.errorf("params."+key, "%q is not a size (e.g. 4096, 1GiB): %v", x, err)
		return 0
	}
	p.errorf("params."+key, "expected a size such as 4096 or 1GiB, found %T %v", v, v)
	return 0
}

func (p *params) duration(key string, def time.Duration) time.Duration {
	v, ok := p.getAs(key, KindDuration)
	if !ok {
		return def
	}
	if s, ok := v.(string); ok {
		d, err := time.ParseDuration(s)
		if err == nil && d > 0 {
			return d
		}
	}
	p.errorf("params."+key, "expected a positive Go duration (e.g. 2s), found %v", v)
	return def
}

// limit reads a numeric threshold: min/max, or equals as an exact bar.
func (p *params) limit(metric string) checks.Limit {
	p.usedT[metric] = true
	t, ok := p.th[metric]
	if !ok {
		return checks.Limit{}
	}
	if t.Equals != nil {
		switch x := t.Equals.(type) {
		case int64:
			return checks.Between(float64(x), float64(x))
		case float64:
			return checks.Between(x, x)
		}
		p.errorf("thresholds."+metric+".equals", "expected a number, found %T %v", t.Equals, t.Equals)
		return checks.Limit{}
	}
	return checks.Limit{Min: t.Min, Max: t.Max}
}

// zeroOnly accepts a threshold the check always applies as "0", so a
// suite may state the bar explicitly but cannot loosen it.
func (p *params) zeroOnly(metric, why string) {
	l := p.limit(metric)
	if l.IsZero() {
		return
	}
	if l.Max == nil || *l.Max != 0 || (l.Min != nil && *l.Min != 0) {
		p.errorf("thresholds."+metric, "only {max: 0} or {equals: 0} is supported: %s", why)
	}
}

// text reads a textual threshold: equals only.
func (p *params) text(metric string) string {
	p.usedT[metric] = true
	t, ok := p.th[metric]
	if !ok {
		return ""
	}
	s, isStr := t.Equals.(string)
	if !isStr || t.Min != nil || t.Max != nil {
		p.errorf("thresholds."+metric, "expected {equals: <text>}, found %s", describe(t))
		return ""
	}
	return s
}

// rest returns the thresholds not read yet, for checks whose metric names
// are open-ended (InfiniBand counters); the caller validates them.
func (p *params) rest() []string {
	var out []string
	for k := range p.th {
		if !p.usedT[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// done reports unknown keys and returns every error.
func (p *params) done() []string {
	var unknownP []string
	for k := range p.p {
		if !p.usedP[k] || !p.declared(k) {
			unknownP = append(unknownP, k)
		}
	}
	sort.Strings(unknownP)
	for _, k := range unknownP {
		p.errorf("params."+k, "unknown parameter for this check type%s", p.accepted())
	}
	for _, k := range p.rest() {
		p.errorf("thresholds."+k, "unknown metric for this check type")
	}
	return p.errs
}

// declared says whether the check type's spec takes param k (any, for a
// type whose params go on as they are).
func (p *params) declared(k string) bool {
	if p.spec == nil || p.spec.OpenParams {
		return true
	}
	_, ok := p.spec.param(k)
	return ok
}

// accepted lists the params the check type takes, for the unknown
// parameter's error.
func (p *params) accepted() string {
	if p.spec == nil || p.spec.OpenParams {
		return ""
	}
	names := make([]string, len(p.spec.Params))
	for i, d := range p.spec.Params {
		names[i] = d.Name
	}
	return " (want " + strings.Join(names, ", ") + ")"
}

func describe(t manifests.Threshold) string {
	var parts []string
	if t.Min != nil {
		parts = append(parts, fmt.Sprintf("min %v", *t.Min))
	}
	if t.Max != nil {
		parts = append(parts, fmt.Sprintf("max %v", *t.Max))
	}
	if t.Equals != nil {
		parts = append(parts, fmt.Sprintf("equals %v (%T)", t.Equals, t.Equals))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
