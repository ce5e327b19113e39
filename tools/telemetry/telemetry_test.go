package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixture is a node's sysfs/procfs: a coretemp package sensor with crit
// and max, an NVMe sensor without limits, two CPU packages of two SMT
// siblings each (cpufreq with base_frequency, throttle counters), and
// /proc/stat.
type fixture struct {
	t    *testing.T
	root string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, root: t.TempDir()}
	f.put("sys/class/hwmon/hwmon0/name", "coretemp")
	f.put("sys/class/hwmon/hwmon0/temp1_label", "Package id 0")
	f.put("sys/class/hwmon/hwmon0/temp1_input", "50000")
	f.put("sys/class/hwmon/hwmon0/temp1_crit", "100000")
	f.put("sys/class/hwmon/hwmon0/temp1_max", "90000")
	f.put("sys/class/hwmon/hwmon1/name", "nvme")
	f.put("sys/class/hwmon/hwmon1/temp1_label", "Composite")
	f.put("sys/class/hwmon/hwmon1/temp1_input", "41850")
	for i, pkg := range []string{"0", "0", "1", "1"} {
		d := fmt.Sprintf("sys/devices/system/cpu/cpu%d/", i)
		f.put(d+"topology/physical_package_id", pkg)
		f.put(d+"topology/core_id", "0")
		f.put(d+"cpufreq/scaling_cur_freq", "2900000")
		f.put(d+"cpufreq/base_frequency", "2000000")
		f.put(d+"thermal_throttle/core_throttle_count", "5")
		f.put(d+"thermal_throttle/package_throttle_count", "9")
	}
	f.stat(100, 900)
	return f
}

func (f *fixture) put(rel, v string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// stat writes /proc/stat with every CPU at the given busy (user) and idle
// jiffies, and cpu2 twice as busy.
func (f *fixture) stat(busy, idle int) {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu  %d 0 0 %d 0 0 0 0 0 0\n", 4*busy, 4*idle)
	for i := range 4 {
		u := busy
		if i == 2 {
			u = 2 * busy
		}
		fmt.Fprintf(&b, "cpu%d %d 0 0 %d 0 0 0 0 0 0\n", i, u, idle)
	}
	b.WriteString("intr 1 2 3\nctxt 42\n")
	f.put("proc/stat", strings.TrimSpace(b.String()))
}

// clock is a fake time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func find(t *testing.T, ss []Series, source, comp, metric string) Series {
	t.Helper()
	for _, s := range ss {
		if s.Source == source && s.Component == comp && s.Metric == metric {
			return s
		}
	}
	t.Fatalf("no series %s %s %s in %s", source, comp, metric, names(ss))
	return Series{}
}

func names(ss []Series) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Source+" "+s.Component+" "+s.Metric)
	}
	return strings.Join(out, ", ")
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// TestSamplerHost samples the fixture three times (start, one tick, stop)
// with the node heating, throttling and loading between them.
func TestSamplerHost(t *testing.T) {
	f := newFixture(t)
	clk := &clock{t: t0}
	var mu sync.Mutex
	var sent [][]Series
	s := New(Options{Root: f.root, Now: clk.now, Send: func(b []Series) { mu.Lock(); sent = append(sent, b); mu.Unlock() }})
	// The interval is long: the test takes the samples itself.
	if err := s.Start(context.Background(), Stage{Name: "soak", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), Stage{Name: "other"}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start: %v, want ErrRunning", err)
	}
	// Between the samples package 1 throttles (core +3 on its one core,
	// package +2), package 0 clocks down, the CPU sensor heats, every CPU
	// works 300 of 400 jiffies (cpu2 twice that).
	f.put("sys/class/hwmon/hwmon0/temp1_input", "97000")
	for _, c := range []string{"cpu2", "cpu3"} {
		f.put("sys/devices/system/cpu/"+c+"/thermal_throttle/core_throttle_count", "8")
		f.put("sys/devices/system/cpu/"+c+"/thermal_throttle/package_throttle_count", "11")
	}
	for _, c := range []string{"cpu0", "cpu1"} {
		f.put("sys/devices/system/cpu/"+c+"/cpufreq/scaling_cur_freq", "1500000")
	}
	f.stat(400, 1000)
	t1 := t0.Add(10 * time.Second)
	s.sampleHost(s.cur, t1)
	f.put("sys/class/hwmon/hwmon0/temp1_input", "60000")
	t2 := t0.Add(20 * time.Second)
	clk.set(t2)
	res := s.Stop()

	if res.Stage != "soak" || !res.Start.Equal(t0) || !res.End.Equal(t2) || res.Samples != 3 || res.Problems != nil {
		t.Fatalf("result: stage %q %s–%s, %d samples, problems %v", res.Stage, res.Start, res.End, res.Samples, res.Problems)
	}
	want := map[[3]string][]float64{
		{SourceHost, "hwmon/coretemp/Package id 0", MetricTemp}:     {50, 97, 60},
		{SourceHost, "hwmon/coretemp/Package id 0", MetricTempCrit}: {100, 100},
		{SourceHost, "hwmon/coretemp/Package id 0", MetricTempMax}:  {90, 90},
		{SourceHost, "hwmon/nvme/Composite", MetricTemp}:            {41.85, 41.85, 41.85},
		{SourceHost, "cpu/0", MetricClock}:                          {2900, 1500, 1500},
		{SourceHost, "cpu/0", MetricBaseClock}:                      {2000, 2000},
		{SourceHost, "cpu/1", MetricClock}:                          {2900, 2900, 2900},
		// Package 1: 3 core events (the siblings share one core) + 2 package events.
		{SourceHost, "cpu/1", MetricThrottled}: {5, 0},
		{SourceHost, "cpu/0", MetricThrottled}: {0, 0},
		// cpu0+cpu1: 600 busy of 800; cpu2+cpu3: 900 of 1100.
		{SourceHost, "cpu/0", MetricBusy}: {75},
		{SourceHost, "cpu/1", MetricBusy}: {100 * 900.0 / 1100},
	}
	for k, vals := range want {
		sr := find(t, res.Series, k[0], k[1], k[2])
		if len(sr.Values) != len(vals) {
			t.Errorf("%v: values %v, want %v", k, sr.Values, vals)
			continue
		}
		for i := range vals {
			if math.Abs(sr.Values[i]-vals[i]) > 1e-9 {
				t.Errorf("%v: values %v, want %v", k, sr.Values, vals)
				break
			}
		}
	}
	if crit := find(t, res.Series, SourceHost, "hwmon/coretemp/Package id 0", MetricTempCrit); !slices.Equal(crit.Times, []int64{ms(t0), ms(t2)}) {
		t.Errorf("a constant limit keeps its first and last point: times %v", crit.Times)
	}
	if temp := find(t, res.Series, SourceHost, "hwmon/coretemp/Package id 0", MetricTemp); !slices.Equal(temp.Times, []int64{ms(t0), ms(t1), ms(t2)}) {
		t.Errorf("temperature times %v", temp.Times)
	}
	if u := find(t, res.Series, SourceHost, "cpu/1", MetricThrottled).Unit; u != UnitEvents {
		t.Errorf("throttled unit %q", u)
	}
	// Everything went out in one batch at the stop: every point, since a
	// batch of an unplanned stage keeps up to 64 a series.
	if len(sent) != 1 {
		t.Fatalf("%d batches sent, want 1", len(sent))
	}
	if len(sent[0]) != len(res.Series) {
		t.Errorf("batch of %d series, result %d", len(sent[0]), len(res.Series))
	}
	for _, b := range sent[0] {
		r := find(t, res.Series, b.Source, b.Component, b.Metric)
		if !slices.Equal(b.Times, r.Times) || !slices.Equal(b.Values, r.Values) {
			t.Errorf("%s %s: sent %v %v, kept %v %v", b.Component, b.Metric, b.Times, b.Values, r.Times, r.Values)
		}
	}
	// A stopped sampler starts again.
	if err := s.Start(context.Background(), Stage{Name: "again", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if r := s.Stop(); r.Stage != "again" {
		t.Fatalf("second stage %q", r.Stage)
	}
	if r := s.Stop(); r.Stage != "" || r.Series != nil {
		t.Fatalf("Stop without a stage: %+v", r)
	}
}

// TestSamplerBareNode: a VM without hwmon, cpufreq or throttle counters
// still gives CPU utilisation, and says what it lacks.
func TestSamplerBareNode(t *testing.T) {
	f := &fixture{t: t, root: t.TempDir()}
	f.put("sys/devices/system/cpu/cpu0/topology/physical_package_id", "0")
	f.put("sys/devices/system/cpu/cpu1/topology/physical_package_id", "0")
	f.put("sys/devices/system/cpu/cpu1/online", "1")
	f.put("proc/stat", "cpu0 10 0 0 90 0 0 0 0\ncpu1 10 0 0 90 0 0 0 0")
	clk := &clock{t: t0}
	s := New(Options{Root: f.root, Now: clk.now})
	if err := s.Start(context.Background(), Stage{Name: "load", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.put("proc/stat", "cpu0 60 0 0 140 0 0 0 0\ncpu1 110 0 0 140 0 0 0 0")
	clk.set(t0.Add(time.Second))
	res := s.Stop()
	if len(res.Series) != 1 {
		t.Fatalf("series %s, want cpu/0 busy only", names(res.Series))
	}
	// cpu0 worked 50 of 100 jiffies, cpu1 100 of 150.
	if b := find(t, res.Series, SourceHost, "cpu/0", MetricBusy); !slices.Equal(b.Values, []float64{60}) || b.Unit != UnitPct {
		t.Errorf("busy %v %s, want [60] %%", b.Values, b.Unit)
	}
	joined := strings.Join(res.Notes, "; ")
	for _, want := range []string{"no hwmon temperature sensor", "no cpufreq", "no thermal_throttle"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", joined, want)
		}
	}
}

type fakeGPU struct {
	readings [][]GPUReading
	err      error
}

func (g *fakeGPU) Sample(ctx context.Context, every time.Duration, out func([]GPUReading)) error {
	for _, r := range g.readings {
		out(r)
	}
	if g.err != nil {
		return g.err
	}
	<-ctx.Done()
	return nil
}

func TestSamplerGPU(t *testing.T) {
	f := newFixture(t)
	clk := &clock{t: t0}
	nan := math.NaN()
	g := &fakeGPU{readings: [][]GPUReading{
		{{Index: 0, Time: t0, TempC: 60, SMMHz: 1980, BaseMHz: 1980, PowerW: 650, ReasonsOK: true, Reasons: 0x1 | 0x4}},
		{{Index: 0, Time: t0.Add(time.Second), TempC: 88, SMMHz: 1400, BaseMHz: 1980, PowerW: 700, ReasonsOK: true, Reasons: 0x4 | 0x40}},
		{{Index: 0, Time: t0.Add(2 * time.Second), TempC: 70, SMMHz: nan, BaseMHz: 1980, PowerW: nan}},
	}}
	s := New(Options{Root: f.root, Now: clk.now, GPU: g})
	if err := s.Start(context.Background(), Stage{Name: "soak", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(3 * time.Second))
	res := s.Stop()
	if v := find(t, res.Series, SourceGPU, "gpu/0", MetricTemp).Values; !slices.Equal(v, []float64{60, 88, 70}) {
		t.Errorf("gpu temp %v", v)
	}
	if v := find(t, res.Series, SourceGPU, "gpu/0", MetricClock).Values; !slices.Equal(v, []float64{1980, 1400}) {
		t.Errorf("gpu clock %v (a value NVML did not give is no point)", v)
	}
	// The power cap and idle bits are not throttling; hardware thermal
	// slowdown is.
	if v := find(t, res.Series, SourceGPU, "gpu/0", MetricThrottled).Values; !slices.Equal(v, []float64{0, 0x40}) {
		t.Errorf("gpu throttled %v", v)
	}
	if b := find(t, res.Series, SourceGPU, "gpu/0", MetricBaseClock); len(b.Values) != 2 {
		t.Errorf("gpu base clock %v %v: a constant keeps two points", b.Times, b.Values)
	}

	g = &fakeGPU{err: errors.New("cure-nvml: NVML unavailable")}
	s = New(Options{Root: f.root, Now: clk.now, GPU: g})
	if err := s.Start(context.Background(), Stage{Name: "soak", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	res = s.Stop()
	if res.Problems[SourceGPU] != "cure-nvml: NVML unavailable" {
		t.Errorf("problems %v", res.Problems)
	}
}

func TestBatching(t *testing.T) {
	for _, c := range []struct {
		planned time.Duration
		every   time.Duration
		points  int
	}{
		{0, time.Minute, UnplannedBatchPoints},
		{10 * time.Minute, time.Minute, 204},
		{72 * time.Hour, 72 * time.Hour / 256, 8},
		{7 * 24 * time.Hour, 7 * 24 * time.Hour / 256, 8},
	} {
		every, points := batching(c.planned)
		if every != c.every || points != c.points {
			t.Errorf("batching(%s) = %s, %d; want %s, %d", c.planned, every, points, c.every, c.points)
		}
	}
}

// TestWireBoundedOverLongStage: a 72-hour stage sampled every 10 s sends
// each series in at most MaxBatches batches of MinBatchPoints, its
// hottest sample among them.
func TestWireBoundedOverLongStage(t *testing.T) {
	f := newFixture(t)
	clk := &clock{t: t0}
	var sentPoints, batches int
	var peak float64
	s := New(Options{Root: f.root, Now: clk.now, Send: func(b []Series) {
		batches++
		for _, sr := range b {
			if sr.Component == "hwmon/coretemp/Package id 0" && sr.Metric == MetricTemp {
				sentPoints += len(sr.Times)
				for _, v := range sr.Values {
					peak = max(peak, v)
				}
			}
		}
	}})
	planned := 72 * time.Hour
	if err := s.Start(context.Background(), Stage{Name: "soak", Interval: time.Hour, Planned: planned}); err != nil {
		t.Fatal(err)
	}
	r := s.cur
	every := 10 * time.Second
	n := int(planned / every)
	last := t0
	comp := "hwmon/coretemp/Package id 0"
	for i := 1; i < n; i++ {
		now := t0.Add(time.Duration(i) * every)
		temp := 60 + float64(i%7)
		if i == n/3 {
			temp = 99
		}
		// One series fed directly: the file reads are TestSamplerHost's.
		r.mu.Lock()
		r.add(s.o, Reading{Source: SourceHost, Component: comp, Metric: MetricTemp, Unit: UnitC, Value: temp}, ms(now))
		r.mu.Unlock()
		if now.Sub(last) >= r.flushEvery { // what the loop does
			last = now
			s.flush(r)
		}
	}
	clk.set(t0.Add(planned))
	res := s.Stop()
	if got := len(find(t, res.Series, SourceHost, "hwmon/coretemp/Package id 0", MetricTemp).Times); got != n+1 {
		t.Errorf("kept %d points, want every sample (%d)", got, n+1)
	}
	if batches > MaxBatches+2 || sentPoints > (MaxBatches+2)*MinBatchPoints {
		t.Errorf("%d batches, %d points of one series on the wire: want at most %d batches of %d", batches, sentPoints, MaxBatches+2, MinBatchPoints)
	}
	if peak != 99 {
		t.Errorf("the wire's hottest sample %v, want 99 (thinning keeps extremes)", peak)
	}
}

func TestSeriesCapAndCompaction(t *testing.T) {
	f := newFixture(t)
	clk := &clock{t: t0}
	s := New(Options{Root: f.root, Now: clk.now, MaxSeries: 3, MaxKeptPoints: 12})
	if err := s.Start(context.Background(), Stage{Name: "soak", Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 8; i++ {
		f.put("sys/class/hwmon/hwmon0/temp1_input", fmt.Sprint(50000+i*1000))
		s.sampleHost(s.cur, t0.Add(time.Duration(i)*time.Second))
	}
	clk.set(t0.Add(9 * time.Second))
	res := s.Stop()
	if len(res.Series) != 3 {
		t.Fatalf("series %s: want the cap of 3", names(res.Series))
	}
	if res.Compacted == 0 {
		t.Fatal("no compaction past MaxKeptPoints")
	}
	temp := find(t, res.Series, SourceHost, "hwmon/coretemp/Package id 0", MetricTemp)
	if slices.Max(temp.Values) != 58 {
		t.Errorf("compaction lost the hottest sample: %v", temp.Values)
	}
	joined := strings.Join(res.Notes, "; ")
	if !strings.Contains(joined, "beyond the cap of 3 series") || !strings.Contains(joined, "halved") {
		t.Errorf("notes %q", joined)
	}
}

func TestMergePairsKeepsWorse(t *testing.T) {
	tm := []int64{1, 2, 3, 4, 5}
	clk, _ := mergePairs(slices.Clone(tm), []float64{10, 8, 7, 9, 5}, worse(MetricClock))
	tt, temp := mergePairs(slices.Clone(tm), []float64{10, 8, 7, 9, 5}, worse(MetricTemp))
	if !slices.Equal(clk, []int64{2, 3, 5}) {
		t.Errorf("clock merge kept times %v, want the lower clocks' [2 3 5]", clk)
	}
	if !slices.Equal(tt, []int64{1, 4, 5}) || !slices.Equal(temp, []float64{10, 9, 5}) {
		t.Errorf("temp merge kept %v %v, want the hotter", tt, temp)
	}
}

func TestThin(t *testing.T) {
	var tm []int64
	var v []float64
	for i := range 1000 {
		tm = append(tm, int64(i))
		v = append(v, float64(i%10))
	}
	v[500] = 1000
	v[700] = -5
	nt, nv, dropped := Thin(tm, v, 100)
	if len(nt) > 100 || len(nt) != len(nv) || dropped != 1000-len(nt) {
		t.Fatalf("thinned to %d points (%d dropped)", len(nt), dropped)
	}
	if !slices.IsSorted(nt) || slices.Max(nv) != 1000 || slices.Min(nv) != -5 {
		t.Errorf("thinning lost order or extremes: max %v min %v", slices.Max(nv), slices.Min(nv))
	}
	if st, sv, d := Thin(tm[:10], v[:10], 100); len(st) != 10 || len(sv) != 10 || d != 0 {
		t.Errorf("a short series is kept whole")
	}
}

func TestSplit(t *testing.T) {
	var batch []Series
	for i := range 300 {
		n := 10
		if i == 5 {
			n = MaxEventPoints // one huge series goes alone
		}
		batch = append(batch, Series{Component: fmt.Sprint(i), Times: make([]int64, n), Values: make([]float64, n)})
	}
	parts := split(batch)
	total := 0
	for _, p := range parts {
		points := 0
		for _, sr := range p {
			points += len(sr.Times)
		}
		if len(p) > MaxEventSeries || (points > MaxEventPoints && len(p) > 1) {
			t.Errorf("part of %d series, %d points", len(p), points)
		}
		total += len(p)
	}
	if total != 300 {
		t.Errorf("%d series in the parts, want 300", total)
	}
}

func TestParseProcStat(t *testing.T) {
	got := parseProcStat([]byte("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 100 5 20 1000 50 3 2 1 0 0\ncpu1 x 1 1 1 1\ncpu7 1 1 1 1\nintr 5\n"))
	want := cpuTimes{busy: 100 + 5 + 20 + 3 + 2 + 1, total: 100 + 5 + 20 + 3 + 2 + 1 + 1000 + 50}
	if len(got) != 2 || got[0] != want || got[7] != (cpuTimes{busy: 3, total: 4}) {
		t.Fatalf("parsed %+v, want cpu0 %+v and cpu7 (old kernels: 4 fields)", got, want)
	}
}
