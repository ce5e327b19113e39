// Package bars judges a stage's sampled telemetry against the stage's
// thresholds (telemetry.thresholds in a ValidationSuite): the hottest
// sample, the share of the stage spent throttled, the clock sustained as a
// share of base. It is pure: series in, verdicts out. A failure names the
// component and when the series first crossed the bar.
package bars

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/telemetry"
)

// Threshold metric names of telemetry.thresholds, defined once.
const (
	CPUTempMaxC         = "cpuTempMaxC"
	GPUTempMaxC         = "gpuTempMaxC"
	HwmonTempMaxC       = "hwmonTempMaxC"
	CPUThrottledShare   = "cpuThrottledShare"
	GPUThrottledShare   = "gpuThrottledShare"
	CPUClockShareOfBase = "cpuClockShareOfBase"
	GPUClockShareOfBase = "gpuClockShareOfBase"
)

// ClockPercentile is the percentile of clock/base that the
// ClockShareOfBase metrics report: the clock the part held for 95 % of
// the stage.
const ClockPercentile = 5

// Units of the judged values.
const (
	UnitC     = "C"
	UnitRatio = "ratio"
)

type stat int

const (
	statMax   stat = iota // the highest sample
	statShare             // the share of samples with a non-zero value
	statPct               // ClockPercentile of the samples over the base series
)

// Metric is one judged statistic of a family of series.
type Metric struct {
	Name string
	// What the value is, for messages.
	What string
	Unit string
	// Family is what the metric judges ("cpu", "gpu", "hwmon"): the
	// component of the verdict that says it found nothing to judge.
	Family string
	source string
	series string // the series metric judged
	stat   stat
	match  func(component string) bool
	// lo, hi bound a bar's values (a share is within [0, 1]).
	lo, hi float64
}

func prefix(p string) func(string) bool {
	return func(c string) bool { return strings.HasPrefix(c, p) }
}

// hwmonChip is the chip of an hwmon component (hwmon/<chip>[-<n>]/<label>).
var hwmonChip = regexp.MustCompile(`^hwmon/(.+?)(?:-[0-9]+)?/`)

func cpuSensor(c string) bool {
	m := hwmonChip.FindStringSubmatch(c)
	return m != nil && telemetry.IsCPUChip(m[1])
}

// Metrics are every metric a stage may bar, in the order verdicts list
// them.
var Metrics = []Metric{
	{Name: CPUTempMaxC, What: "hottest CPU sensor sample", Unit: UnitC, Family: "cpu", source: telemetry.SourceHost, series: telemetry.MetricTemp,
		stat: statMax, match: cpuSensor, lo: -273, hi: 1000},
	{Name: GPUTempMaxC, What: "hottest GPU sample", Unit: UnitC, Family: "gpu", source: telemetry.SourceGPU, series: telemetry.MetricTemp,
		stat: statMax, match: prefix("gpu/"), lo: -273, hi: 1000},
	{Name: HwmonTempMaxC, What: "hottest sample", Unit: UnitC, Family: "hwmon", source: telemetry.SourceHost, series: telemetry.MetricTemp,
		stat: statMax, match: prefix("hwmon/"), lo: -273, hi: 1000},
	{Name: CPUThrottledShare, What: "share of samples with thermal-throttle events", Unit: UnitRatio, Family: "cpu", source: telemetry.SourceHost,
		series: telemetry.MetricThrottled, stat: statShare, match: prefix("cpu/"), lo: 0, hi: 1},
	{Name: GPUThrottledShare, What: "share of samples throttled (hardware or thermal slowdown, power brake)", Unit: UnitRatio, Family: "gpu",
		source: telemetry.SourceGPU, series: telemetry.MetricThrottled, stat: statShare, match: prefix("gpu/"), lo: 0, hi: 1},
	{Name: CPUClockShareOfBase, What: fmt.Sprintf("clock/base held for %d%% of samples (p%d)", 100-ClockPercentile, ClockPercentile), Unit: UnitRatio,
		Family: "cpu", source: telemetry.SourceHost, series: telemetry.MetricClock, stat: statPct, match: prefix("cpu/"), lo: 0, hi: 10},
	{Name: GPUClockShareOfBase, What: fmt.Sprintf("SM clock/base held for %d%% of samples (p%d)", 100-ClockPercentile, ClockPercentile), Unit: UnitRatio,
		Family: "gpu", source: telemetry.SourceGPU, series: telemetry.MetricClock, stat: statPct, match: prefix("gpu/"), lo: 0, hi: 10},
}

// Names lists the metric names.
func Names() []string {
	out := make([]string, len(Metrics))
	for i, m := range Metrics {
		out[i] = m.Name
	}
	return out
}

func lookup(name string) (Metric, bool) {
	i := slices.IndexFunc(Metrics, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return Metric{}, false
	}
	return Metrics[i], true
}

// Validate checks a stage's telemetry thresholds: every key a known
// metric, every bar numeric and within the metric's range. Each problem
// is "thresholds.<key>: why", in key order.
func Validate(th map[string]manifests.Threshold) []string {
	keys := make([]string, 0, len(th))
	for k := range th {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		m, ok := lookup(k)
		if !ok {
			out = append(out, fmt.Sprintf("thresholds.%s: unknown metric for stage telemetry (want one of %s)", k, strings.Join(Names(), ", ")))
			continue
		}
		if _, err := limit(th[k]); err != nil {
			out = append(out, fmt.Sprintf("thresholds.%s: %v", k, err))
			continue
		}
		l, _ := limit(th[k])
		for _, b := range []*float64{l.Min, l.Max} {
			if b != nil && (*b < m.lo || *b > m.hi) {
				out = append(out, fmt.Sprintf("thresholds.%s: %v is outside [%v, %v] (%s, in %s)", k, *b, m.lo, m.hi, m.What, m.Unit))
			}
		}
	}
	return out
}

// limit reads a threshold as a numeric bar (equals: an exact one).
func limit(t manifests.Threshold) (checks.Limit, error) {
	if t.Equals != nil {
		switch x := t.Equals.(type) {
		case int64:
			return checks.Between(float64(x), float64(x)), nil
		case float64:
			return checks.Between(x, x), nil
		case int:
			return checks.Between(float64(x), float64(x)), nil
		}
		return checks.Limit{}, fmt.Errorf("equals: expected a number, found %T %v", t.Equals, t.Equals)
	}
	if t.Min == nil && t.Max == nil {
		return checks.Limit{}, fmt.Errorf("set min, max or equals")
	}
	return checks.Limit{Min: t.Min, Max: t.Max}, nil
}

// Verdict is one component's judgement over a stage's series.
type Verdict struct {
	Component string
	Check     string // CheckName(stage)
	Stage     string
	Status    checks.Status
	Observed  string
	Expected  string
	Message   string
	// At is when the first judged series first crossed its bar (zero for
	// a pass).
	At           time.Time
	Start, End   time.Time // the stage's sampling
	Measurements []Measurement
}

// Measurement is one judged value with its unit.
type Measurement struct {
	Metric string
	Value  float64
	Unit   string
}

// CheckName is the check name of a stage's telemetry verdicts: the colon
// keeps it apart from every suite check name.
func CheckName(stage string) string { return "telemetry:" + stage }

// reading is one metric's value on one component.
type reading struct {
	m     Metric
	l     checks.Limit
	value float64
	// first is the time of the first sample past the bar (0: none).
	first int64
	n     int
}

// Judge applies the stage's bars to what its sampling gathered: one
// verdict per component a bar applies to, and per family of metrics that
// found nothing to judge (SKIP when the node has no such part, ERROR when
// its source failed).
func Judge(res telemetry.Result, th map[string]manifests.Threshold) []Verdict {
	byComp := map[string][]reading{}
	var comps []string
	missing := map[string][]string{} // family -> metrics without series
	var families []string
	for _, m := range Metrics {
		t, ok := th[m.Name]
		if !ok {
			continue
		}
		l, err := limit(t)
		if err != nil {
			continue // Validate refused it when the suite was built
		}
		found := false
		for _, s := range res.Series {
			if s.Source != m.source || s.Metric != m.series || !m.match(s.Component) || len(s.Values) == 0 {
				continue
			}
			r, ok := judgeSeries(m, l, s, res.Series)
			if !ok {
				continue
			}
			found = true
			if _, seen := byComp[s.Component]; !seen {
				comps = append(comps, s.Component)
			}
			byComp[s.Component] = append(byComp[s.Component], r)
		}
		if !found {
			if _, seen := missing[m.Family]; !seen {
				families = append(families, m.Family)
			}
			missing[m.Family] = append(missing[m.Family], m.Name)
		}
	}
	var out []Verdict
	for _, c := range comps {
		out = append(out, verdict(res, c, byComp[c]))
	}
	for _, f := range families {
		out = append(out, nothingJudged(res, f, missing[f]))
	}
	return out
}

// judgeSeries computes m over s; ok is false when s cannot give it (a
// clock without its base).
func judgeSeries(m Metric, l checks.Limit, s telemetry.Series, all []telemetry.Series) (reading, bool) {
	r := reading{m: m, l: l, n: len(s.Values)}
	switch m.stat {
	case statMax:
		r.value = slices.Max(s.Values)
		for i, v := range s.Values {
			if !l.OK(v) {
				r.first = s.Times[i]
				break
			}
		}
	case statShare:
		on := 0
		for i, v := range s.Values {
			if v != 0 {
				on++
				if r.first == 0 {
					r.first = s.Times[i]
				}
			}
		}
		r.value = float64(on) / float64(len(s.Values))
	case statPct:
		base := baseOf(all, s)
		if base == nil {
			return reading{}, false
		}
		ratios := make([]float64, 0, len(s.Values))
		for i, v := range s.Values {
			b := base(s.Times[i])
			if b <= 0 {
				continue
			}
			ratio := v / b
			ratios = append(ratios, ratio)
			if r.first == 0 && !l.OK(ratio) {
				r.first = s.Times[i]
			}
		}
		if len(ratios) == 0 {
			return reading{}, false
		}
		r.n = len(ratios)
		r.value = Percentile(ratios, ClockPercentile)
	}
	if l.OK(r.value) {
		r.first = 0 // passing: no violation to date
	} else if r.first == 0 && len(s.Times) > 0 {
		r.first = s.Times[0]
	}
	return r, true
}

// baseOf returns the base clock of s's component at a time: the latest
// base sample at or before it (the first before any); nil without one.
func baseOf(all []telemetry.Series, s telemetry.Series) func(int64) float64 {
	i := slices.IndexFunc(all, func(b telemetry.Series) bool {
		return b.Source == s.Source && b.Component == s.Component && b.Metric == telemetry.MetricBaseClock && len(b.Values) > 0
	})
	if i < 0 {
		return nil
	}
	b := all[i]
	return func(t int64) float64 {
		j := sort.Search(len(b.Times), func(k int) bool { return b.Times[k] > t }) - 1
		return b.Values[max(j, 0)]
	}
}

// Percentile is the p-th percentile of vs by nearest rank (p in (0, 100]).
func Percentile(vs []float64, p float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func verdict(res telemetry.Result, comp string, rs []reading) Verdict {
	v := Verdict{Component: comp, Check: CheckName(res.Stage), Stage: res.Stage, Status: checks.Pass, Start: res.Start, End: res.End}
	var obs, exp, bad []string
	var at int64
	for _, r := range rs {
		val := round(r.value)
		obs = append(obs, r.m.Name+"="+checks.Num(val))
		exp = append(exp, r.l.Expr(r.m.Name))
		v.Measurements = append(v.Measurements, Measurement{Metric: r.m.Name, Value: val, Unit: r.m.Unit})
		if r.l.OK(r.value) {
			continue
		}
		v.Status = checks.Fail
		bad = append(bad, fmt.Sprintf("%s=%s %s outside %s (%s over %d samples), %s", r.m.Name, checks.Num(val), r.m.Unit, r.l.Expr(r.m.Name),
			r.m.What, r.n, firstAt(r, res)))
		if at == 0 || r.first < at {
			at = r.first
		}
	}
	v.Observed, v.Expected = strings.Join(obs, " "), strings.Join(exp, " ")
	if v.Status == checks.Fail {
		v.At = time.UnixMilli(at).UTC()
		v.Message = strings.Join(bad, "; ")
	} else {
		v.Message = fmt.Sprintf("within the bars over stage %s (%s)", res.Stage, res.End.Sub(res.Start).Round(time.Second))
	}
	return v
}

// firstAt says when a failing reading first crossed its bar.
func firstAt(r reading, res telemetry.Result) string {
	what := "first past the bar"
	if r.m.stat == statShare {
		what = "first throttled"
	}
	t := time.UnixMilli(r.first).UTC()
	return fmt.Sprintf("%s at %s (%s into stage %s)", what, t.Format("2006-01-02 15:04:05 UTC"), t.Sub(res.Start).Round(time.Second), res.Stage)
}

func nothingJudged(res telemetry.Result, family string, metrics []string) Verdict {
	v := Verdict{Component: family, Check: CheckName(res.Stage), Stage: res.Stage, Status: checks.Skip, Start: res.Start, End: res.End,
		Expected: strings.Join(metrics, ", ")}
	source := telemetry.SourceHost
	if family == "gpu" {
		source = telemetry.SourceGPU
	}
	if p := res.Problems[source]; p != "" {
		v.Status = checks.Error
		v.Message = fmt.Sprintf("%s not judged: %s sampling failed in stage %s: %s", strings.Join(metrics, ", "), source, res.Stage, p)
		return v
	}
	v.Message = fmt.Sprintf("%s not judged: this node gave no %s series to judge in stage %s", strings.Join(metrics, ", "), family, res.Stage)
	if len(res.Notes) > 0 {
		v.Message += " (" + strings.Join(res.Notes, "; ") + ")"
	}
	return v
}

// round keeps 4 decimals: enough for a ratio, exact for a temperature.
func round(v float64) float64 {
	return math.Round(v*10000) / 10000
}
