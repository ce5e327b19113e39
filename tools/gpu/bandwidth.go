package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Measurement is one measured number with its unit, as the runner's
// verdicts carry it (checks.Measurement).
type Measurement struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
}

// Check names of the bandwidth verdicts.
const (
	CheckNVBandwidth = "nvbandwidth"
	CheckNCCL        = "nccl"
)

// NodeComponent names a result about all the node's GPUs together (the
// all-reduce over every GPU).
const NodeComponent = "gpu/all"

// GBps is the unit of every bandwidth here: nvbandwidth and nccl-tests
// both print GB/s (10^9 bytes per second).
const GBps = "GB/s"

// nvbMetric is what an nvbandwidth testcase measures: per GPU (a
// one-row host table, a column per GPU) or per GPU pair (a GPU x GPU
// table), and which of its tables (by SUM key suffix).
type nvbMetric struct {
	metric string
	pair   bool
	table  string // SUM key suffix of the table used ("" = the testcase's own key)
	what   string
}

// Metric is the metric the testcase becomes.
func (m nvbMetric) Metric() string { return m.metric }

// NVBandwidthMetrics maps the copy-engine testcases CURE judges to the
// metric each becomes. Host tables are "CPU(row) -> GPU(column)"; device
// tables "GPU(row) -> GPU(column)" (read) or "<-" (write), one value per
// ordered pair; the bidirectional ones are judged on their total table.
var NVBandwidthMetrics = map[string]nvbMetric{
	"host_to_device_memcpy_ce":                       {"h2dGBps", false, "", "host to GPU"},
	"device_to_host_memcpy_ce":                       {"d2hGBps", false, "", "GPU to host"},
	"host_to_device_bidirectional_memcpy_ce":         {"h2dBidirGBps", false, "", "host to GPU, both directions loaded"},
	"device_to_host_bidirectional_memcpy_ce":         {"d2hBidirGBps", false, "", "GPU to host, both directions loaded"},
	"device_to_device_memcpy_read_ce":                {"d2dReadGBps", true, "", "GPU to GPU read"},
	"device_to_device_memcpy_write_ce":               {"d2dWriteGBps", true, "", "GPU to GPU write"},
	"device_to_device_bidirectional_memcpy_read_ce":  {"d2dBidirReadGBps", true, "_total", "GPU to GPU read, both directions (total)"},
	"device_to_device_bidirectional_memcpy_write_ce": {"d2dBidirWriteGBps", true, "_total", "GPU to GPU write, both directions (total)"},
}

// NCCL metrics.
const (
	MetricAllReduceBusBW    = "allReduceBusGBps"    // busbw at the largest size, out of place, every GPU of the node
	MetricAllReduceAvgBusBW = "allReduceAvgBusGBps" // nccl-tests' "Avg bus bandwidth" over the sweep
	// MetricAllReducePairBusBW is the busbw at the largest size of one GPU
	// pair's run (ncclPairs): with two ranks busbw equals algbw.
	MetricAllReducePairBusBW = "allReducePairBusGBps"
)

// BandwidthMetrics lists every metric a bandwidth bar may name.
func BandwidthMetrics() []string {
	out := []string{MetricAllReduceBusBW, MetricAllReduceAvgBusBW, MetricAllReducePairBusBW}
	for _, m := range NVBandwidthMetrics {
		out = append(out, m.metric)
	}
	slices.Sort(out)
	return out
}

// Bandwidth is a bandwidth run to make and judge (cure-nvml reads it from
// the expectations file): nvbandwidth testcases and/or nccl-tests'
// all_reduce_perf, with minimum bars per metric in GB/s.
type Bandwidth struct {
	// NVBandwidth are the testcases to run (NVBandwidthMetrics keys).
	NVBandwidth []string `json:"nvbandwidth,omitempty"`
	// NCCLAllReduce runs all_reduce_perf over every GPU of the node.
	NCCLAllReduce bool `json:"ncclAllReduce,omitempty"`
	// NCCLPairs runs it once per GPU pair as well (n(n-1)/2 runs), so a
	// slow pair is named, not only the node.
	NCCLPairs bool `json:"ncclPairs,omitempty"`
	// NCCLMinBytes and NCCLMaxBytes bound the size sweep (factor 2);
	// defaults 8 MiB and 8 GiB.
	NCCLMinBytes int64 `json:"ncclMinBytes,omitempty"`
	NCCLMaxBytes int64 `json:"ncclMaxBytes,omitempty"`
	// Min are the bars: metric -> GB/s.
	Min map[string]float64 `json:"min,omitempty"`
}

// Validate names what is wrong with b.
func (b Bandwidth) Validate() error {
	var errs []string
	for _, tc := range b.NVBandwidth {
		if _, ok := NVBandwidthMetrics[tc]; !ok {
			errs = append(errs, fmt.Sprintf("nvbandwidth testcase %q is not one CURE judges (want one of %s)", tc, strings.Join(nvbTestcases(), ", ")))
		}
	}
	for m, v := range b.Min {
		if !slices.Contains(BandwidthMetrics(), m) {
			errs = append(errs, fmt.Sprintf("bar on %q: not a bandwidth metric (want one of %s)", m, strings.Join(BandwidthMetrics(), ", ")))
		}
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Sprintf("bar on %s: %v GB/s is not a positive bandwidth", m, v))
		}
	}
	if b.NCCLMinBytes < 0 || b.NCCLMaxBytes < 0 || (b.NCCLMaxBytes > 0 && b.NCCLMinBytes > b.NCCLMaxBytes) {
		errs = append(errs, fmt.Sprintf("nccl sizes %d..%d: want 0 < min <= max", b.NCCLMinBytes, b.NCCLMaxBytes))
	}
	if b.NCCLPairs && !b.NCCLAllReduce {
		errs = append(errs, "ncclPairs without ncclAllReduce")
	}
	if len(errs) > 0 {
		return fmt.Errorf("bandwidth: %s", strings.Join(errs, "; "))
	}
	return nil
}

func nvbTestcases() []string {
	var out []string
	for k := range NVBandwidthMetrics {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Naming maps a CUDA device (its PCI address as the tool printed it, else
// its index) to the component its verdicts name.
type Naming func(index int, busID string) string

// pairComponent names a GPU pair "gpu/3-5" (components "gpu/3" and
// "gpu/5", lower first).
func pairComponent(a, b string) string {
	a, b = strings.TrimPrefix(a, "gpu/"), strings.TrimPrefix(b, "gpu/")
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if (errA == nil && errB == nil && y < x) || ((errA != nil || errB != nil) && b < a) {
		a, b = b, a
	}
	return "gpu/" + a + "-" + b
}

// NVBandwidthVerdicts judges nvbandwidth's results against bars (metric
// -> GB/s minimum): one verdict per GPU (host tests) and per GPU pair
// (device tests, each pair's worse direction), measurements in GB/s; a
// slow pair names both directions, and a GPU every one of whose pairs is
// slow is named as the common cause. requested are the testcases asked
// for, in order (nvbandwidth does not name a waived one).
func NVBandwidthVerdicts(r *NVBandwidth, requested []string, bars map[string]float64, name Naming) []Verdict {
	j := &nvbJudge{byIndex: map[int]string{}, name: name, accs: map[string]*nvbAcc{}, slowPairs: map[string]map[string]bool{}, version: "nvbandwidth"}
	var comps []string
	for _, d := range r.Devices {
		c := name(d.Index, d.BusID)
		j.byIndex[d.Index] = c
		comps = append(comps, c)
	}
	if r.Version != "" {
		j.version += " " + r.Version
	}
	for ti, t := range r.Tests {
		tname := t.Name
		if tname == "" && ti < len(requested) {
			tname = requested[ti]
		}
		j.test(t, tname, bars)
	}
	// A GPU in a slow pair with every other GPU is the likely cause.
	if len(comps) >= 3 {
		for _, c := range comps {
			if len(j.slowPairs[c]) == len(comps)-1 {
				a := j.get(c)
				a.status = Fail
				a.fails = append(a.fails, fmt.Sprintf("every pair with %s is below its bar (%d of %d): the GPU or its own NVLinks, not one path",
					c, len(j.slowPairs[c]), len(comps)-1))
			}
		}
	}
	var out []Verdict
	for _, c := range j.order {
		a := j.accs[c]
		v := Verdict{Component: c, Check: CheckNVBandwidth, Status: a.status, Measurements: a.meas,
			Observed: measText(a.meas), Expected: barsText(a.meas, bars)}
		msg := append(append([]string{}, a.fails...), a.notes...)
		v.Message = strings.TrimSuffix(j.version+": "+strings.Join(msg, "; "), ": ")
		out = append(out, v)
	}
	return append(out, j.system...)
}

// nvbJudge accumulates NVBandwidthVerdicts' verdicts, per component in the
// order first seen.
type nvbJudge struct {
	byIndex map[int]string
	name    Naming
	accs    map[string]*nvbAcc
	order   []string
	system  []Verdict
	version string
	// Pair failures per GPU, to name a GPU all of whose pairs are slow.
	slowPairs map[string]map[string]bool
}

type nvbAcc struct {
	meas   []Measurement
	fails  []string
	notes  []string
	status Status
}

func (j *nvbJudge) comp(i int) string {
	if c, ok := j.byIndex[i]; ok {
		return c
	}
	return j.name(i, "")
}

func (j *nvbJudge) get(c string) *nvbAcc {
	if a, ok := j.accs[c]; ok {
		return a
	}
	a := &nvbAcc{status: Pass}
	j.accs[c], j.order = a, append(j.order, c)
	return a
}

// test judges one testcase's results (tname: its name, or the requested
// one when nvbandwidth printed none).
func (j *nvbJudge) test(t NVBTest, tname string, bars map[string]float64) {
	m, known := NVBandwidthMetrics[tname]
	switch {
	case t.Status == NVBWaived:
		j.system = append(j.system, Verdict{Component: "gpu", Check: CheckNVBandwidth, Status: Skip, Observed: "waived",
			Message: fmt.Sprintf("%s waived %s: it does not apply to this node (one GPU, or no peer access)", j.version, tname)})
		return
	case t.Status == NVBError:
		j.system = append(j.system, Verdict{Component: "gpu", Check: CheckNVBandwidth, Status: Error, Observed: "error",
			Message: fmt.Sprintf("%s %s: %s", j.version, tname, t.Message)})
		return
	case !known:
		return
	}
	tab, ok := table(t, m.table)
	if !ok {
		j.system = append(j.system, Verdict{Component: "gpu", Check: CheckNVBandwidth, Status: Error,
			Message: fmt.Sprintf("%s %s: no %q table in its output", j.version, tname, t.Name+m.table)})
		return
	}
	bar, barred := bars[m.metric]
	if m.pair {
		j.pairTable(m, tab, bar, barred)
		return
	}
	if len(tab.Values) == 0 {
		return
	}
	for i, v := range tab.Values[0] {
		a := j.get(j.comp(i))
		if math.IsNaN(v) {
			a.notes = append(a.notes, fmt.Sprintf("%s: not measured", m.metric))
			continue
		}
		a.meas = append(a.meas, Measurement{m.metric, v, GBps})
		if barred && v < bar {
			a.status = Fail
			a.fails = append(a.fails, fmt.Sprintf("%s %.1f GB/s < %.4g GB/s (%s)", m.metric, v, bar, m.what))
		}
	}
}

// pairTable judges a device table: each pair on its worse direction.
func (j *nvbJudge) pairTable(m nvbMetric, tab NVBMatrix, bar float64, barred bool) {
	n := len(tab.Values)
	for x := range n {
		for y := x + 1; y < n && y < len(tab.Values[x]); y++ {
			if x >= len(tab.Values[y]) {
				continue
			}
			cx, cy := j.comp(x), j.comp(y)
			pc := pairComponent(cx, cy)
			a := j.get(pc)
			xy, yx := tab.Values[x][y], tab.Values[y][x]
			if math.IsNaN(xy) || math.IsNaN(yx) {
				a.notes = append(a.notes, fmt.Sprintf("%s: not measured (no peer access between %s and %s)", m.metric, cx, cy))
				if barred {
					a.status = Fail
					a.fails = append(a.fails, fmt.Sprintf("%s not measured: %s and %s have no peer access", m.metric, cx, cy))
				}
				continue
			}
			worst := min(xy, yx)
			a.meas = append(a.meas, Measurement{m.metric, worst, GBps})
			dirs := fmt.Sprintf("%s->%s %.1f, %s->%s %.1f GB/s", cx, cy, xy, cy, cx, yx)
			if !(barred && worst < bar) {
				a.notes = append(a.notes, m.metric+" "+dirs)
				continue
			}
			a.status = Fail
			a.fails = append(a.fails, fmt.Sprintf("%s %.1f GB/s < %.4g GB/s (%s: %s)", m.metric, worst, bar, m.what, dirs))
			for _, c := range []string{cx, cy} {
				if j.slowPairs[c] == nil {
					j.slowPairs[c] = map[string]bool{}
				}
				j.slowPairs[c][pc] = true
			}
		}
	}
}

func table(t NVBTest, suffix string) (NVBMatrix, bool) {
	for _, m := range t.Matrices {
		if m.Key == t.Name+suffix || (suffix == "" && t.Name == "" && len(t.Matrices) == 1) {
			return m, true
		}
	}
	return NVBMatrix{}, false
}

func measText(ms []Measurement) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s=%.1f", m.Metric, m.Value))
	}
	return strings.Join(parts, " ")
}

func barsText(ms []Measurement, bars map[string]float64) string {
	var parts []string
	seen := map[string]bool{}
	for _, m := range ms {
		if b, ok := bars[m.Metric]; ok && !seen[m.Metric] {
			seen[m.Metric] = true
			parts = append(parts, fmt.Sprintf("%s>=%.4g", m.Metric, b))
		}
	}
	return strings.Join(parts, " ")
}

// NCCLVerdict judges one all_reduce_perf run over the GPUs of component
// (the node, "gpu", or a pair): no wrong element, a completed run, and
// the bus bandwidth at the largest size at or above its bar.
func NCCLVerdict(r *NCCLTest, component, metric string, bars map[string]float64) Verdict {
	v := Verdict{Component: component, Check: CheckNCCL}
	who := "nccl-tests"
	if r.Version != "" {
		who += " " + r.Version
	}
	if r.NCCLVersion != "" {
		who += ", NCCL " + r.NCCLVersion
	}
	if len(r.Failures) > 0 {
		v.Status, v.Message = Error, who+": "+strings.Join(r.Failures, "; ")
		return v
	}
	row, ok := r.Largest()
	if !ok || !r.Summary {
		v.Status, v.Message = Error, who+": the run ended without its results (no table or no \"# Avg bus bandwidth\" line)"
		return v
	}
	v.Measurements = []Measurement{{metric, row.OutOfPlace.BusBW, GBps}}
	v.Observed = fmt.Sprintf("%s=%.1f at %s", metric, row.OutOfPlace.BusBW, bytesText(uint64(row.Bytes)))
	if metric == MetricAllReduceBusBW {
		v.Measurements = append(v.Measurements, Measurement{MetricAllReduceAvgBusBW, r.AvgBusBW, GBps})
		v.Observed += fmt.Sprintf(", %s=%.1f", MetricAllReduceAvgBusBW, r.AvgBusBW)
	}
	v.Expected = barsText(v.Measurements, bars)
	var bad []string
	if w := r.WrongElements(); w > 0 || r.OutOfBounds > 0 {
		bad = append(bad, fmt.Sprintf("%g wrong elements, %d out-of-bounds results: the reduction returned corrupt data", w, r.OutOfBounds))
	}
	for _, m := range v.Measurements {
		if b, ok := bars[m.Metric]; ok && m.Value < b {
			bad = append(bad, fmt.Sprintf("%s %.1f GB/s < %.4g GB/s", m.Metric, m.Value, b))
		}
	}
	v.Status, v.Message = Pass, who+fmt.Sprintf(": %d ranks", len(r.Ranks))
	if len(bad) > 0 {
		v.Status, v.Message = Fail, who+": "+strings.Join(bad, "; ")
	}
	return v
}

// BandwidthRun runs what b asks for with the programs at nvbandwidth and
// allReduce (either may be "" when b does not need it) through run, and
// returns the verdicts. gpus are the node's GPUs, CUDA order (PCI bus
// order: the programs run with CUDA_DEVICE_ORDER=PCI_BUS_ID).
func BandwidthRun(ctx context.Context, run Exec, b Bandwidth, nvbandwidth, allReduce string, gpus int, name Naming, timeout time.Duration) ([]Verdict, error) {
	env := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID"}
	var out []Verdict
	do := func(args []string, extraEnv ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		o, err := run(cctx, append(env, extraEnv...), args[0], args[1:]...)
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			return o, fmt.Errorf("running %s: %w", strings.Join(args, " "), err)
		}
		return o, nil
	}
	if len(b.NVBandwidth) > 0 {
		o, err := do(append([]string{nvbandwidth, "-t"}, b.NVBandwidth...))
		if err != nil {
			return nil, err
		}
		r, perr := ParseNVBandwidth(o)
		if perr != nil {
			out = append(out, Verdict{Component: "gpu", Check: CheckNVBandwidth, Status: Error, Message: perr.Error() + "; it printed: " + clip(o, 512)})
		} else {
			out = append(out, NVBandwidthVerdicts(r, b.NVBandwidth, b.Min, name)...)
		}
	}
	if !b.NCCLAllReduce {
		return out, nil
	}
	minB, maxB := b.NCCLMinBytes, b.NCCLMaxBytes
	if minB == 0 {
		minB = 8 << 20
	}
	if maxB == 0 {
		maxB = 8 << 30
	}
	sweep := func(ngpus int) []string {
		return []string{allReduce, "-b", strconv.FormatInt(minB, 10), "-e", strconv.FormatInt(maxB, 10), "-f", "2", "-g", strconv.Itoa(ngpus)}
	}
	judge := func(o []byte, comp, metric string) Verdict {
		r, err := ParseNCCLTest(o)
		if err != nil {
			return Verdict{Component: comp, Check: CheckNCCL, Status: Error, Message: err.Error() + "; it printed: " + clip(o, 512)}
		}
		return NCCLVerdict(r, comp, metric, b.Min)
	}
	o, err := do(sweep(gpus))
	if err != nil {
		return nil, err
	}
	out = append(out, judge(o, NodeComponent, MetricAllReduceBusBW))
	if b.NCCLPairs {
		for i := range gpus {
			for j := i + 1; j < gpus; j++ {
				o, err := do(sweep(2), fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d,%d", i, j))
				if err != nil {
					return nil, err
				}
				out = append(out, judge(o, pairComponent(name(i, ""), name(j, "")), MetricAllReducePairBusBW))
			}
		}
	}
	return out, nil
}

// NamingFor names CUDA devices as Collect names NVML's (by PCI address:
// position in exp.BusIDs, else NVML index, which is CUDA's order under
// CUDA_DEVICE_ORDER=PCI_BUS_ID).
func NamingFor(lib Library, exp Expect) Naming {
	targets := TargetsFor(lib, exp)
	byIndex := map[int]string{}
	byBus := map[string]string{}
	for _, t := range targets {
		byIndex[t.ID] = t.Component
		if dev, err := lib.DeviceByIndex(t.ID); err == nil {
			if pci, err := dev.PCI(); err == nil {
				byBus[NormalizeBusID(pci.BusID)] = t.Component
			}
		}
	}
	return func(index int, busID string) string {
		if c, ok := byBus[busID]; ok && busID != "" {
			return c
		}
		if c, ok := byIndex[index]; ok {
			return c
		}
		return "gpu/" + strconv.Itoa(index)
	}
}
