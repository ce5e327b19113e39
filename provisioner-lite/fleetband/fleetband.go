// Package fleetband judges a node's measured results against the recent
// passing results of the other nodes of its SKU: the coordinator's MARGINAL
// verdict, for the node that clears every absolute bar and is still slower
// than its fleet. Pure: the run's results and the fleet's samples in,
// judgements and verdicts out; the pipeline reads the store and writes back.
//
// The fleet of a check's metric is one vote per other node: the median of
// its components' values in its latest acceptance run within the suite's
// window (Pool). A node that ran ten times weighs as much as one that ran
// once, and a node that reports a hundred components (a hostile runner
// naming parts it does not have) weighs as much as one with a single drive:
// one vote among N, so it moves the fleet median at most from one of the
// other nodes' votes to the next (the median of N votes lies between the
// honest votes' order statistics whatever one vote is). Statistics are
// robust: the median and the median absolute deviation of the votes
// (scaled by MADScale, with a floor of MinRelSpread of the median when the
// fleet agrees too closely); both break down only when half the votes are
// bad, so a few bad nodes neither drag the median nor widen the band. A
// node's own components are judged against the votes of the other nodes
// only. A band names, per metric, how many robust deviations below (and/or
// above) the median a value may lie; with fewer than the suite's MinNodes
// other nodes the band is not applied and the judgement says so.
package fleetband

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/natural"
)

// MaxJudgements bounds what one run's judgement keeps (a run has at most
// the store's verdict cap of results; a suite names a few bands).
const MaxJudgements = 2048

// Measurement is one measured number of a result.
type Measurement struct {
	Metric string
	Value  float64
	Unit   string
}

// Result is one verdict of the run being judged.
type Result struct {
	Component, Check string
	Status           curev1.VerdictStatus
	Measurements     []Measurement
}

// Sample is one fleet value: a node's component's measured metric of a
// check as stored, or (out of Pool) a node's vote.
type Sample struct {
	Node, Run, Component string
	Value                float64
	Unit                 string
	Time                 time.Time
	// Components is how many components' values a vote is the median of
	// (0 in a stored sample).
	Components int
}

// Key names a check's metric.
type Key struct{ Check, Metric string }

// Input is what one run is judged on.
type Input struct {
	Node string // the node judged: never part of its own fleet
	Now  time.Time
	// Window is how recent a fleet sample must be; MinNodes how many other
	// nodes the fleet needs before a band applies (see Policy).
	Window   time.Duration
	MinNodes int
	// Bands are the suite's fleet bands: check name -> metric -> band.
	Bands   map[string]map[string]manifests.Band
	Results []Result
	// Fleet are the samples of each banded check's metric, as the store
	// returns them (filtered again here: window, node, unit, one per node
	// and component).
	Fleet map[Key][]Sample
}

// Policy is a suite's fleet window and minimum node count, defaults
// applied.
func Policy(s *manifests.ValidationSuiteSpec) (window time.Duration, minNodes int) {
	window, minNodes = time.Duration(manifests.DefaultFleetWindow), manifests.DefaultFleetMinNodes
	if s.Fleet != nil {
		if s.Fleet.Window > 0 {
			window = time.Duration(s.Fleet.Window)
		}
		if s.Fleet.MinNodes > 0 {
			minNodes = s.Fleet.MinNodes
		}
	}
	return window, minNodes
}

// Bands are a suite's fleet bands by check and metric (nil: none).
func Bands(s *manifests.ValidationSuiteSpec) map[string]map[string]manifests.Band {
	var out map[string]map[string]manifests.Band
	for _, c := range s.Checks {
		if len(c.Fleet) == 0 {
			continue
		}
		if out == nil {
			out = map[string]map[string]manifests.Band{}
		}
		out[c.Name] = c.Fleet
	}
	return out
}

// Judgement is one measured metric of one component against its fleet.
type Judgement struct {
	Component, Check, Metric, Unit string
	Value                          float64
	Measured                       bool    // the result carried the metric
	Percentile                     float64 // NaN when there is no fleet
	// Applied: the fleet had MinNodes other nodes and the band was
	// checked; Marginal: the value lies outside it.
	Applied, Marginal bool
	// Low and High are the band in the metric's unit (nil: open side).
	Low, High     *float64
	Below, Above  float64 // the band's factors (0: open side)
	MinNodes      int
	Nodes         int // other nodes in the fleet
	Median        float64
	Note, Message string
}

// Distribution is the fleet of one check's metric as it was judged against.
type Distribution struct {
	Key
	Unit string
	Stats
}

// Verdict is a MARGINAL verdict the coordinator adds to the run: one per
// component and check, naming every metric outside its band.
type Verdict struct {
	Component, Check  string
	Observed          string // metric=value unit; ...
	Expected          string // the bands, in the metric's unit
	Message           string
	MarginalJudgments []Judgement
	// Unmeasured are the banded metrics the verdict did not carry: a
	// PASS that leaves its measurement out would escape its band, so the
	// verdict is an ERROR instead (doubt is not success).
	Unmeasured []string
}

// Outcome is a run's fleet judgement.
type Outcome struct {
	Judgements    []Judgement
	Distributions []Distribution
	Verdicts      []Verdict
	Omitted       int // judgements past MaxJudgements
}

// Marginal reports whether any judgement is MARGINAL.
func (o Outcome) Marginal() bool { return len(o.Verdicts) > 0 }

// Pool is the fleet of one check's metric for node: one vote per other
// node, from its samples no older than since, in unit (when set) and
// finite. A node's vote is the median of its components' values in its
// latest run among them (the run of its latest sample; ties: the later run
// id), each component counted once (its latest value in that run): however
// many components a node names, it has one vote. Votes are in node order,
// Component empty and Components the count behind each.
func Pool(samples []Sample, node string, since time.Time, unit string) []Sample {
	latestRun := map[string]Sample{} // node -> its latest sample
	for _, s := range samples {
		if !usable(s, node, since, unit) {
			continue
		}
		if cur, ok := latestRun[s.Node]; !ok || s.Time.After(cur.Time) || (s.Time.Equal(cur.Time) && s.Run > cur.Run) {
			latestRun[s.Node] = s
		}
	}
	type nc struct{ node, comp string }
	comps := map[nc]Sample{}
	for _, s := range samples {
		if !usable(s, node, since, unit) || s.Run != latestRun[s.Node].Run {
			continue
		}
		k := nc{s.Node, s.Component}
		if cur, ok := comps[k]; !ok || s.Time.After(cur.Time) {
			comps[k] = s
		}
	}
	values := map[string][]float64{}
	for k, s := range comps {
		values[k.node] = append(values[k.node], s.Value)
	}
	out := make([]Sample, 0, len(values))
	for n, vs := range values {
		slices.Sort(vs)
		last := latestRun[n]
		out = append(out, Sample{Node: n, Run: last.Run, Value: quantile(vs, 0.5), Unit: last.Unit, Time: last.Time, Components: len(vs)})
	}
	slices.SortFunc(out, func(a, b Sample) int { return natural.Compare(a.Node, b.Node) })
	return out
}

// usable: s is a sample of another node than node, in the window, in unit
// (when set), finite.
func usable(s Sample, node string, since time.Time, unit string) bool {
	return s.Node != node && !s.Time.Before(since) && (unit == "" || s.Unit == unit) && !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0)
}

// Judge judges every banded metric of the run's passing results.
func Judge(in Input) Outcome {
	jd := &judging{in: in, since: in.Now.Add(-in.Window), dists: map[distKey]Stats{}, verdicts: map[[2]string]*Verdict{}}
	results := slices.Clone(in.Results)
	slices.SortStableFunc(results, func(a, b Result) int {
		if c := natural.Compare(a.Component, b.Component); c != 0 {
			return c
		}
		return natural.Compare(a.Check, b.Check)
	})
	for _, r := range results {
		bands := in.Bands[r.Check]
		if len(bands) == 0 || (r.Status != curev1.VerdictStatus_PASS && r.Status != curev1.VerdictStatus_MARGINAL) {
			continue
		}
		metrics := make([]string, 0, len(bands))
		for m := range bands {
			metrics = append(metrics, m)
		}
		slices.Sort(metrics)
		for _, metric := range metrics {
			if len(jd.out.Judgements) >= MaxJudgements {
				jd.out.Omitted++
				continue
			}
			jd.judge(r, metric, bands[metric])
		}
	}
	for _, k := range jd.order {
		v := jd.verdicts[k]
		v.explain()
		jd.out.Verdicts = append(jd.out.Verdicts, *v)
	}
	return jd.out
}

// distKey is one fleet distribution: a check's metric in one unit.
type distKey struct {
	Key
	unit string
}

// judging is one Judge call's state: the distributions drawn so far (each
// once), the fleet verdicts by component and check in the order met.
type judging struct {
	in       Input
	since    time.Time
	dists    map[distKey]Stats
	verdicts map[[2]string]*Verdict
	order    [][2]string
	out      Outcome
}

// judge judges one banded metric of a result against the fleet: a
// judgement always, and a fleet verdict of the result's component and
// check when it is outside the band or not measured.
func (jd *judging) judge(r Result, metric string, band manifests.Band) {
	j := Judgement{Component: r.Component, Check: r.Check, Metric: metric, MinNodes: jd.in.MinNodes, Percentile: math.NaN()}
	if band.Below != nil {
		j.Below = *band.Below
	}
	if band.Above != nil {
		j.Above = *band.Above
	}
	m, ok := measurement(r.Measurements, metric)
	if !ok {
		j.Note = fmt.Sprintf("fleet band not applied: the verdict carries no %s measurement", metric)
		jd.out.Judgements = append(jd.out.Judgements, j)
		v := verdictOf(jd.verdicts, &jd.order, r.Component, r.Check)
		v.Unmeasured = append(v.Unmeasured, metric)
		return
	}
	j.Value, j.Unit, j.Measured = m.Value, m.Unit, true
	st := jd.distribution(distKey{Key{r.Check, metric}, m.Unit})
	j.Nodes, j.Median = st.Nodes, st.Median
	if st.Samples > 0 {
		j.Percentile = st.Percentile(m.Value)
	}
	if st.Nodes < jd.in.MinNodes {
		j.Note = fmt.Sprintf("fleet band not applied: %d of %d nodes", st.Nodes, jd.in.MinNodes)
		jd.out.Judgements = append(jd.out.Judgements, j)
		return
	}
	j.Applied = true
	if band.Below != nil {
		lo := st.Median - *band.Below*st.Spread
		j.Low = &lo
		j.Marginal = j.Marginal || m.Value < lo
	}
	if band.Above != nil {
		hi := st.Median + *band.Above*st.Spread
		j.High = &hi
		j.Marginal = j.Marginal || m.Value > hi
	}
	j.Message = message(j, st)
	jd.out.Judgements = append(jd.out.Judgements, j)
	if j.Marginal {
		v := verdictOf(jd.verdicts, &jd.order, r.Component, r.Check)
		v.MarginalJudgments = append(v.MarginalJudgments, j)
	}
}

// distribution is the fleet's distribution of dk, drawn from the fleet's
// samples on first use and kept in the outcome.
func (jd *judging) distribution(dk distKey) Stats {
	st, seen := jd.dists[dk]
	if !seen {
		st = Describe(Pool(jd.in.Fleet[dk.Key], jd.in.Node, jd.since, dk.unit))
		jd.dists[dk] = st
		jd.out.Distributions = append(jd.out.Distributions, Distribution{Key: dk.Key, Unit: dk.unit, Stats: st})
	}
	return st
}

// explain writes a fleet verdict's observed, expected and message from its
// marginal judgements and unmeasured metrics.
func (v *Verdict) explain() {
	var obs, exp, msg []string
	for _, j := range v.MarginalJudgments {
		obs = append(obs, fmt.Sprintf("%s=%s", j.Metric, withUnit(j.Value, j.Unit)))
		exp = append(exp, j.Metric+" "+bandExpr(j)+" (fleet band)")
		msg = append(msg, j.Message)
	}
	if len(v.Unmeasured) > 0 {
		exp = append(exp, strings.Join(v.Unmeasured, ", ")+" measured (fleet band)")
		msg = append(msg, Unjudgeable+"the check has a fleet band on "+strings.Join(v.Unmeasured, ", ")+" and the verdict carries no such measurement (or the coordinator refused it)")
	}
	v.Observed, v.Expected = strings.Join(obs, "; "), strings.Join(exp, "; ")
	v.Message = "outside the fleet band: " + strings.Join(msg, "; ")
	if len(v.MarginalJudgments) == 0 {
		v.Message = strings.Join(msg, "; ")
	}
}

// Unjudgeable begins the message of a fleet verdict that is an ERROR
// because a banded PASS left its measurement out.
const Unjudgeable = "fleet band cannot be judged: "

// verdictOf is the run's fleet verdict of (component, check), made on
// first use and remembered in order.
func verdictOf(verdicts map[[2]string]*Verdict, order *[][2]string, component, check string) *Verdict {
	k := [2]string{component, check}
	v := verdicts[k]
	if v == nil {
		v = &Verdict{Component: component, Check: check}
		verdicts[k] = v
		*order = append(*order, k)
	}
	return v
}

func measurement(ms []Measurement, metric string) (Measurement, bool) {
	for _, m := range ms {
		if m.Metric == metric && !math.IsNaN(m.Value) && !math.IsInf(m.Value, 0) {
			return m, true
		}
	}
	return Measurement{}, false
}

// message is what a judged value says, e.g. "readMBps=41 MB/s, fleet median
// 203 MB/s (n=4), band >= 150 MB/s (3.0 MAD), percentile 0".
func message(j Judgement, st Stats) string {
	return fmt.Sprintf("%s=%s, fleet median %s (n=%d), band %s (%s MAD), percentile %s",
		j.Metric, withUnit(j.Value, j.Unit), withUnit(st.Median, j.Unit), st.Nodes, bandExpr(j), factors(j), Num(j.Percentile))
}

// bandExpr is the band in the metric's unit: ">= 150 MB/s", "<= 90 C",
// "150..250 MB/s".
func bandExpr(j Judgement) string {
	switch {
	case j.Low != nil && j.High != nil:
		return Num(*j.Low) + ".." + withUnit(*j.High, j.Unit)
	case j.Low != nil:
		return ">= " + withUnit(*j.Low, j.Unit)
	case j.High != nil:
		return "<= " + withUnit(*j.High, j.Unit)
	}
	return "open"
}

func factors(j Judgement) string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	switch {
	case j.Below > 0 && j.Above > 0 && j.Below != j.Above:
		return f(j.Below) + " below, " + f(j.Above) + " above"
	case j.Below > 0:
		return f(j.Below)
	}
	return f(j.Above)
}

func withUnit(v float64, unit string) string {
	if unit == "" {
		return Num(v)
	}
	return Num(v) + " " + unit
}

// Num formats a measured value for people: three significant figures at
// most below 100, whole numbers above ("41", "3.27", "203", "12500").
func Num(v float64) string {
	a := math.Abs(v)
	var s string
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case a >= 100 || a == 0:
		s = strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case a >= 10:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	default:
		s = strconv.FormatFloat(v, 'g', 3, 64)
	}
	if strings.Contains(s, ".") && !strings.ContainsAny(s, "eE") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
