// Package telemetry samples a node's host telemetry while a suite stage
// loads it: hwmon temperatures (with each sensor's own crit and max), CPU
// clocks against their base, the x86 thermal-throttle counters, CPU
// utilisation from /proc/stat, and GPU temperature, clocks, power and
// throttle reasons from a GPUSource (the cure-nvml helper on a node).
//
// A Sampler keeps every sample of the stage for the bars on the series
// (tools/telemetry/bars), and hands the points to Send in batches, thinned
// (extremes kept) so that a soak of days stays bounded on the wire. It
// reads files under a sysfs/procfs root, so tests run it over fixtures.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/cure-oss/cure/manifests"
)

// Sources of series: the host's files, or the GPUs through NVML.
const (
	SourceHost = "host"
	SourceGPU  = "gpu"
)

// Series metrics. Components are cpu/<package>, gpu/<NVML index> and
// hwmon/<chip>/<label> (as tools/checks/thermal names sensors).
const (
	MetricTemp     = "temp_c"      // °C: an hwmon sensor, a GPU
	MetricTempCrit = "temp_crit_c" // °C: an hwmon sensor's own critical limit (temp*_crit)
	MetricTempMax  = "temp_max_c"  // °C: an hwmon sensor's own high limit (temp*_max)
	// MetricClock is a CPU package's mean scaling_cur_freq, or a GPU's SM
	// clock, in MHz.
	MetricClock = "clock_mhz"
	// MetricBaseClock is what MetricClock is compared with: a CPU
	// package's base_frequency (cpuinfo_max_freq where the driver
	// publishes no base), a GPU's default applications SM clock (its max
	// SM clock where NVML has no default).
	MetricBaseClock = "base_clock_mhz"
	// MetricThrottled is zero for a sample interval without throttling:
	// for a CPU package the thermal-throttle events counted in it, for a
	// GPU the throttling clocks-event-reason bits set (GPUThrottleReasons).
	MetricThrottled = "throttled"
	MetricBusy      = "busy_pct" // % of a CPU package's time not idle, from /proc/stat
	MetricPower     = "power_w"  // W: a GPU's power draw
)

// Units of the series.
const (
	UnitC      = "C"
	UnitMHz    = "MHz"
	UnitW      = "W"
	UnitPct    = "%"
	UnitEvents = "events"
	UnitMask   = "mask"
)

// Series is one metric of one component sampled over a stage, in time
// order.
type Series struct {
	Source    string
	Component string
	Metric    string
	Unit      string
	Times     []int64 // unix ms, ascending
	Values    []float64
}

// Reading is one value read at one sample.
type Reading struct {
	Source, Component, Metric, Unit string
	Value                           float64
}

// GPUSource samples the node's GPUs: Sample reads every GPU each interval
// until ctx ends, handing out one reading per GPU per sample; it returns
// nil when ctx ended (whatever stopping cost), or why it could not go on
// (no NVML, the helper died), which the stage's result reports.
type GPUSource interface {
	Sample(ctx context.Context, every time.Duration, out func([]GPUReading)) error
}

// GPUReading is one sample of one GPU; a value NVML did not give is NaN.
type GPUReading struct {
	Index   int // NVML index: the component is gpu/<Index>
	Time    time.Time
	TempC   float64
	SMMHz   float64
	BaseMHz float64
	PowerW  float64
	// Reasons are the clocks-event reasons set (nvmlClocksEventReasons);
	// ReasonsOK says they were read.
	Reasons   uint64
	ReasonsOK bool
}

// Bounds of one stage's sampling.
const (
	// DefaultMaxSeries bounds the series of one stage: a node has tens of
	// sensors, eight GPUs and two CPU packages, not hundreds of each.
	DefaultMaxSeries = 320
	// MaxHwmonSensors bounds the hwmon sensors sampled (CPU chips first).
	MaxHwmonSensors = 64
	// DefaultMaxKeptPoints bounds the points kept for the bars (16 bytes
	// each): a 72-hour stage sampled every 10 s is 25,920 points a series.
	// Beyond it every series is halved, each pair merged into the sample
	// that is worse for its bar (the hotter, the lower clock, the
	// throttled one), so a bar judged after a merge can only be stricter.
	DefaultMaxKeptPoints = 4_000_000
	// FlushEvery is how often points go to Send at least; a long stage
	// sends at most MaxBatches batches (its planned length / MaxBatches
	// apart, when that is longer).
	FlushEvery = time.Minute
	MaxBatches = 256
	// WirePoints is about how many points one series sends over a whole
	// stage of known length (each batch thinned to its share, at least
	// MinBatchPoints); a stage of unknown length sends at most
	// UnplannedBatchPoints a batch.
	WirePoints           = 2048
	MinBatchPoints       = 8
	UnplannedBatchPoints = 64
	// MaxEventSeries and MaxEventPoints bound one Send call (one event on
	// the wire, well under the coordinator's 1 MiB message limit).
	MaxEventSeries = 128
	MaxEventPoints = 16384
)

// Options configure a Sampler.
type Options struct {
	// Root holds sys/ and proc/ ("/" on a node).
	Root string
	// GPU samples GPUs; nil: none (a node without GPUs, or no helper).
	GPU GPUSource
	// Send receives the points in batches while the stage runs and at its
	// end; nil: nothing is sent. It may be called from another goroutine.
	Send func([]Series)
	Log  *slog.Logger
	Now  func() time.Time
	// MaxSeries and MaxKeptPoints: zero means the defaults.
	MaxSeries     int
	MaxKeptPoints int
}

// Stage is the stage to sample.
type Stage struct {
	Name string
	// Interval is the sampling period; zero: manifests.DefaultTelemetryInterval.
	Interval time.Duration
	// Planned is how long the stage is planned to run (it sizes the
	// batches); zero: unknown.
	Planned time.Duration
}

// Result is what a stage's sampling gathered.
type Result struct {
	Stage      string
	Start, End time.Time
	// Series are every series at full resolution (or merged as
	// DefaultMaxKeptPoints says), by source, component and metric.
	Series []Series
	// Samples is how many times the host was read.
	Samples int
	// Problems says, per source, why it gave nothing or stopped (the GPU
	// helper failed): a bar on that source cannot be judged.
	Problems map[string]string
	// Notes say what was not sampled and why (no hwmon, no cpufreq, the
	// series cap).
	Notes []string
	// Compacted is how many times the kept points were halved.
	Compacted int
}

// Sampler samples one stage at a time: Start, then Stop.
type Sampler struct {
	o   Options
	mu  sync.Mutex
	cur *stageRun
}

// New returns a sampler with o's defaults filled in.
func New(o Options) *Sampler {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.MaxKeptPoints <= 0 {
		o.MaxKeptPoints = DefaultMaxKeptPoints
	}
	return &Sampler{o: o}
}

type key struct{ source, component, metric string }

type seriesBuf struct {
	Series
	pendT []int64 // not sent yet
	pendV []float64
}

// stageRun is one stage's sampling state; mu guards everything below it.
type stageRun struct {
	stage      Stage
	start      time.Time
	cancel     context.CancelFunc
	done       chan struct{} // the host loop ended
	gpuDone    chan struct{} // the GPU loop ended (closed at once without a GPU source)
	host       *hostReader
	flushEvery time.Duration
	perBatch   int

	mu        sync.Mutex
	series    map[key]*seriesBuf
	order     []key
	kept      int
	compacted int
	refused   int
	samples   int
	problems  map[string]string
	notes     []string
}

// ErrRunning is Start's answer while a stage is being sampled.
var ErrRunning = errors.New("telemetry: a stage is already being sampled")

// Start begins sampling st: one host sample at once, then every interval,
// and the GPUs on their own loop. It returns at once.
func (s *Sampler) Start(ctx context.Context, st Stage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		return fmt.Errorf("%w (%s)", ErrRunning, s.cur.stage.Name)
	}
	if st.Interval <= 0 {
		st.Interval = time.Duration(manifests.DefaultTelemetryInterval)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &stageRun{stage: st, start: s.o.Now(), cancel: cancel, done: make(chan struct{}), gpuDone: make(chan struct{}),
		series: map[key]*seriesBuf{}, problems: map[string]string{}}
	r.flushEvery, r.perBatch = batching(st.Planned)
	var notes []string
	r.host, notes = newHostReader(s.o.Root)
	r.notes = append(r.notes, notes...)
	s.cur = r
	s.o.Log.Info("telemetry: sampling stage", "stage", st.Name, "interval", st.Interval, "hwmon_sensors", len(r.host.sensors),
		"cpu_packages", len(r.host.pkgs), "gpu", s.o.GPU != nil)
	s.sampleHost(r, r.start)
	go s.hostLoop(ctx, r)
	if s.o.GPU == nil {
		close(r.gpuDone)
	} else {
		go s.gpuLoop(ctx, r)
	}
	return nil
}

// batching sizes a stage's batches from its planned length.
func batching(planned time.Duration) (every time.Duration, perBatch int) {
	if planned <= 0 {
		return FlushEvery, UnplannedBatchPoints
	}
	every = max(FlushEvery, planned/MaxBatches)
	batches := max(1, int(planned/every))
	return every, max(MinBatchPoints, WirePoints/batches)
}

func (s *Sampler) hostLoop(ctx context.Context, r *stageRun) {
	defer close(r.done)
	tick := time.NewTicker(r.stage.Interval)
	defer tick.Stop()
	lastFlush := r.start
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := s.o.Now()
		s.sampleHost(r, now)
		if now.Sub(lastFlush) >= r.flushEvery {
			lastFlush = now
			s.flush(r)
		}
	}
}

func (s *Sampler) gpuLoop(ctx context.Context, r *stageRun) {
	defer close(r.gpuDone)
	err := s.o.GPU.Sample(ctx, r.stage.Interval, func(rs []GPUReading) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, g := range rs {
			r.addGPU(s.o, g)
		}
	})
	if err != nil {
		s.o.Log.Warn("telemetry: GPU sampling stopped", "stage", r.stage.Name, "err", err)
		r.mu.Lock()
		r.problems[SourceGPU] = err.Error()
		r.mu.Unlock()
	}
}

// sampleHost reads the host once at t.
func (s *Sampler) sampleHost(r *stageRun, t time.Time) {
	rs := r.host.read()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples++
	ms := t.UnixMilli()
	for _, rd := range rs {
		r.add(s.o, rd, ms)
	}
}

// add appends one point, creating its series while under the cap; callers
// hold r.mu.
func (r *stageRun) add(o Options, rd Reading, ms int64) {
	if math.IsNaN(rd.Value) || math.IsInf(rd.Value, 0) {
		return
	}
	k := key{rd.Source, rd.Component, rd.Metric}
	b := r.series[k]
	if b == nil {
		if len(r.series) >= o.MaxSeries {
			r.refused++
			return
		}
		b = &seriesBuf{Series: Series{Source: rd.Source, Component: rd.Component, Metric: rd.Metric, Unit: rd.Unit}}
		r.series[k] = b
		r.order = append(r.order, k)
	}
	if n := len(b.Times); n > 0 && ms < b.Times[n-1] {
		return // a clock step back: keep the series in time order
	}
	if constant[rd.Metric] && extendRun(b.Times, b.Values, ms, rd.Value) {
		if !extendRun(b.pendT, b.pendV, ms, rd.Value) {
			b.pendT, b.pendV = append(b.pendT, ms), append(b.pendV, rd.Value)
		}
		return
	}
	b.Times, b.Values = append(b.Times, ms), append(b.Values, rd.Value)
	b.pendT, b.pendV = append(b.pendT, ms), append(b.pendV, rd.Value)
	r.kept++
	if r.kept > o.MaxKeptPoints {
		r.compact()
	}
}

// constant metrics are limits that rarely change: a run of equal values
// is kept as its first and last point.
var constant = map[string]bool{MetricBaseClock: true, MetricTempCrit: true, MetricTempMax: true}

// extendRun moves the last point of t to ms when it and the one before
// both hold v, and says whether it did.
func extendRun(t []int64, v []float64, ms int64, val float64) bool {
	n := len(t)
	if n < 2 || v[n-1] != val || v[n-2] != val {
		return false
	}
	t[n-1] = ms
	return true
}

func (r *stageRun) addGPU(o Options, g GPUReading) {
	comp := fmt.Sprintf("gpu/%d", g.Index)
	ms := g.Time.UnixMilli()
	put := func(metric, unit string, v float64) {
		r.add(o, Reading{Source: SourceGPU, Component: comp, Metric: metric, Unit: unit, Value: v}, ms)
	}
	put(MetricTemp, UnitC, g.TempC)
	put(MetricClock, UnitMHz, g.SMMHz)
	put(MetricPower, UnitW, g.PowerW)
	if g.ReasonsOK {
		put(MetricThrottled, UnitMask, float64(g.Reasons&GPUThrottleReasons))
	}
	put(MetricBaseClock, UnitMHz, g.BaseMHz)
}

// GPUThrottleReasons are the clocks-event reasons that count as
// throttling: hardware slowdown, software and hardware thermal slowdown,
// hardware power brake (nvml.h). The software power cap is not among them:
// a GPU under full load runs at its power limit by design.
const GPUThrottleReasons uint64 = 0x8 | 0x20 | 0x40 | 0x80

// compact halves every series, merging each pair of points into the one
// worse for the series' bar; callers hold r.mu.
func (r *stageRun) compact() {
	r.kept = 0
	for _, b := range r.series {
		b.Times, b.Values = mergePairs(b.Times, b.Values, worse(b.Metric))
		r.kept += len(b.Times)
	}
	r.compacted++
}

// worse picks which of two values a merge keeps: a lower clock, else the
// higher value (hotter, more throttled, busier).
func worse(metric string) func(a, b float64) bool {
	if metric == MetricClock {
		return func(a, b float64) bool { return a <= b }
	}
	return func(a, b float64) bool { return a >= b }
}

func mergePairs(t []int64, v []float64, keepFirst func(a, b float64) bool) ([]int64, []float64) {
	if len(t) <= 2 {
		return t, v
	}
	nt, nv := t[:0], v[:0]
	for i := 0; i < len(t); i += 2 {
		j := i
		if i+1 < len(t) && !keepFirst(v[i], v[i+1]) {
			j = i + 1
		}
		nt, nv = append(nt, t[j]), append(nv, v[j])
	}
	return nt, nv
}

// flush hands the pending points to Send, thinned to the batch size and
// split to the per-event bounds.
func (s *Sampler) flush(r *stageRun) {
	r.mu.Lock()
	var batch []Series
	for _, k := range r.order {
		b := r.series[k]
		if len(b.pendT) == 0 {
			continue
		}
		t, v, _ := Thin(b.pendT, b.pendV, r.perBatch)
		batch = append(batch, Series{Source: b.Source, Component: b.Component, Metric: b.Metric, Unit: b.Unit, Times: t, Values: v})
		b.pendT, b.pendV = nil, nil
	}
	r.mu.Unlock()
	if s.o.Send == nil {
		return
	}
	for _, part := range split(batch) {
		s.o.Send(part)
	}
}

// split cuts a batch into parts within MaxEventSeries and MaxEventPoints.
func split(batch []Series) [][]Series {
	var out [][]Series
	var cur []Series
	points := 0
	for _, sr := range batch {
		if len(cur) > 0 && (len(cur) == MaxEventSeries || points+len(sr.Times) > MaxEventPoints) {
			out, cur, points = append(out, cur), nil, 0
		}
		cur = append(cur, sr)
		points += len(sr.Times)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Stop ends the stage's sampling: a last host sample, the GPU loop
// stopped, the remaining points sent; it returns every series. Stop
// without a running stage returns an empty Result.
func (s *Sampler) Stop() Result {
	s.mu.Lock()
	r := s.cur
	s.cur = nil
	s.mu.Unlock()
	if r == nil {
		return Result{}
	}
	r.cancel()
	<-r.done
	<-r.gpuDone
	end := s.o.Now()
	s.sampleHost(r, end)
	s.flush(r)

	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Stage: r.stage.Name, Start: r.start, End: end, Samples: r.samples, Notes: r.notes, Compacted: r.compacted}
	if len(r.problems) > 0 {
		res.Problems = r.problems
	}
	if r.refused > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d readings of series beyond the cap of %d series were not kept", r.refused, s.o.MaxSeries))
	}
	if r.compacted > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the kept points were halved %d time(s) to stay within %d (each pair merged into the sample worse for its bar)",
			r.compacted, s.o.MaxKeptPoints))
	}
	for _, k := range r.order {
		res.Series = append(res.Series, r.series[k].Series)
	}
	sort.SliceStable(res.Series, func(i, j int) bool {
		a, b := res.Series[i], res.Series[j]
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if a.Component != b.Component {
			return a.Component < b.Component
		}
		return a.Metric < b.Metric
	})
	s.o.Log.Info("telemetry: stage sampled", "stage", r.stage.Name, "series", len(res.Series), "samples", r.samples,
		"problems", len(res.Problems), "notes", len(res.Notes))
	return res
}
