// Package cpustress loads every online CPU with integer and floating-point
// work whose result is checked against a reference computed before the
// load, while it samples cpufreq and the x86 thermal-throttle counters from
// sysfs; it judges each CPU package on computation errors, throttle-event
// deltas and the clock ratio it held under load.
package cpustress

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/tools/checks"
)

// Options configure the stress.
type Options struct {
	// Root holds sys/devices/system/cpu ("/" on a node).
	Root string
	// Duration of the load; must be positive.
	Duration time.Duration
	// SampleEvery is the cpufreq sampling period (default 1s, at most Duration).
	SampleEvery time.Duration
	// Throttle bars the core and package throttle-event deltas per package.
	Throttle checks.Limit
	// BaseFreqRatio bars mean scaling_cur_freq / base_frequency under load:
	// below 1 the package did not hold its guaranteed base clock.
	// base_frequency is published by intel_pstate; without it the metric is
	// not reported.
	BaseFreqRatio checks.Limit
	// RequireTelemetry fails a package whose cpufreq or throttle counters
	// are absent while a bar needs them; otherwise they read "n/a" (VMs
	// have neither).
	RequireTelemetry bool
	// Pin binds the calling OS thread to cpu; nil means sched_setaffinity.
	// A pin error leaves the worker unpinned (noted in the verdict).
	Pin func(cpu int) error

	afterLoad func() // tests change fixture counters here
}

// CPU is one online logical CPU from sysfs.
type CPU struct {
	ID, Package, Core int
	dir               string
}

var cpuDir = regexp.MustCompile(`^cpu([0-9]+)$`)

// CPUs lists the online logical CPUs under root, sorted by id.
func CPUs(root string) ([]CPU, error) {
	base := filepath.Join(root, "sys/devices/system/cpu")
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("cpustress: list cpus: %w", err)
	}
	var out []CPU
	for _, e := range entries {
		m := cpuDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		dir := filepath.Join(base, e.Name())
		// cpu0 often has no "online" file: it cannot be taken offline.
		if on, err := checks.ReadString(filepath.Join(dir, "online")); err == nil && on != "1" {
			continue
		}
		c := CPU{ID: id, dir: dir}
		if v, err := checks.ReadInt(filepath.Join(dir, "topology/physical_package_id")); err == nil && v >= 0 {
			c.Package = int(v)
		}
		if v, err := checks.ReadInt(filepath.Join(dir, "topology/core_id")); err == nil {
			c.Core = int(v)
		} else {
			c.Core = id
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cpustress: no online cpu under %s", base)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Check runs the load and returns one verdict per package, component cpu/<package>.
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	if o.Duration <= 0 {
		return nil, fmt.Errorf("cpustress: duration must be positive, found %s", o.Duration)
	}
	cpus, err := CPUs(o.Root)
	if err != nil {
		return nil, err
	}
	pin := o.Pin
	if pin == nil {
		pin = pinThread
	}
	every := o.SampleEvery
	if every <= 0 {
		every = time.Second
	}
	every = min(every, o.Duration)

	before := readThrottle(cpus)
	golden := work(seedFor(0))

	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errs     = make([]atomic.Uint64, len(cpus))
		rounds   atomic.Uint64
		unpinned atomic.Int64
	)
	for i, c := range cpus {
		wg.Go(func() {
			if err := pin(c.ID); err != nil {
				unpinned.Add(1)
			}
			for ctx.Err() == nil {
				if work(seedFor(0)) != golden {
					errs[i].Add(1)
				}
				rounds.Add(1)
			}
		})
	}
	freq := map[int]*freqAcc{}
	tick := time.NewTicker(every)
	samples := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			// At least one sample, taken while the workers still run.
			if samples == 0 {
				sampleFreq(cpus, freq)
			}
		case <-tick.C:
			sampleFreq(cpus, freq)
			samples++
		}
	}
	tick.Stop()
	wg.Wait()
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("cpustress: %w", err)
	}
	if o.afterLoad != nil {
		o.afterLoad()
	}
	after := readThrottle(cpus)

	note := fmt.Sprintf("%d rounds on %d workers over %s", rounds.Load(), len(cpus), o.Duration)
	if n := unpinned.Load(); n > 0 {
		note += fmt.Sprintf(", %d workers unpinned", n)
	}
	return packageVerdicts(cpus, errs, before, after, freq, note, o), nil
}

// packageVerdicts judges each CPU package: its workers' compute errors,
// throttling between before and after, and sampled frequencies; note (how
// the load ran) ends each verdict's message.
func packageVerdicts(cpus []CPU, errs []atomic.Uint64, before, after []throttle, freq map[int]*freqAcc, note string, o Options) []checks.Verdict {
	pkgs := map[int][]int{} // package -> indexes into cpus
	for i, c := range cpus {
		pkgs[c.Package] = append(pkgs[c.Package], i)
	}
	ids := make([]int, 0, len(pkgs))
	for p := range pkgs {
		ids = append(ids, p)
	}
	sort.Ints(ids)
	var out []checks.Verdict
	for _, p := range ids {
		idx := pkgs[p]
		var cerr uint64
		for _, i := range idx {
			cerr += errs[i].Load()
		}
		rs := []checks.Reading{
			checks.Value("computeErrors", float64(cerr), checks.AtMost(0)),
			checks.Value("cpus", float64(len(idx)), checks.Limit{}),
		}
		rs = append(rs, throttleReadings(cpus, idx, before, after, o)...)
		rs = append(rs, freq[p].readings(o)...)
		v := checks.Judge(fmt.Sprintf("cpu/%d", p), rs...)
		if v.Message != "" {
			v.Message += "; " + note
		} else {
			v.Message = note
		}
		out = append(out, v)
	}
	return out
}

// work is one round of mixed integer and floating-point work with a
// deterministic result; a CPU that computes a different one is faulty.
func work(seed uint64) uint64 {
	x := seed | 1
	f := float64(seed%1000) + 0.5
	var acc uint64
	for i := range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		acc += x * uint64(i|1)
		f = math.Sqrt(f*1.000001+float64(x&0xff)) + 1.5
	}
	return acc ^ math.Float64bits(f)
}

func seedFor(i int) uint64 { return 0x9e3779b97f4a7c15 + uint64(i) }

type throttle struct {
	core, pkg uint64
	ok        bool
}

// readThrottle reads thermal_throttle/{core,package}_throttle_count (x86
// therm_throt driver; absent on VMs and other architectures).
func readThrottle(cpus []CPU) []throttle {
	out := make([]throttle, len(cpus))
	for i, c := range cpus {
		core, err1 := checks.ReadUint(filepath.Join(c.dir, "thermal_throttle/core_throttle_count"))
		pkg, err2 := checks.ReadUint(filepath.Join(c.dir, "thermal_throttle/package_throttle_count"))
		out[i] = throttle{core: core, pkg: pkg, ok: err1 == nil && err2 == nil}
	}
	return out
}

// throttleReadings sums core events over distinct cores (SMT siblings
// share a core's counter) and takes the package counter once (every CPU
// of a package reports the same one).
func throttleReadings(cpus []CPU, idx []int, before, after []throttle, o Options) []checks.Reading {
	var core, pkg uint64
	seen := map[int]bool{}
	for _, i := range idx {
		if !before[i].ok || !after[i].ok {
			return missing(o, o.Throttle, "coreThrottle", "packageThrottle")
		}
		if !seen[cpus[i].Core] {
			seen[cpus[i].Core] = true
			core += after[i].core - before[i].core
		}
		pkg = max(pkg, after[i].pkg-before[i].pkg)
	}
	return []checks.Reading{
		checks.Value("coreThrottle", float64(core), o.Throttle),
		checks.Value("packageThrottle", float64(pkg), o.Throttle),
	}
}

func missing(o Options, l checks.Limit, metrics ...string) []checks.Reading {
	if !o.RequireTelemetry {
		l = checks.Limit{}
	}
	var rs []checks.Reading
	for _, m := range metrics {
		rs = append(rs, checks.Missing(m, l))
	}
	return rs
}

type freqAcc struct {
	cur, base float64 // sums of kHz over samples
	n         int
	minKHz    float64
}

// sampleFreq adds one scaling_cur_freq sample per CPU to its package.
func sampleFreq(cpus []CPU, acc map[int]*freqAcc) {
	for _, c := range cpus {
		cur, err := checks.ReadInt(filepath.Join(c.dir, "cpufreq/scaling_cur_freq"))
		if err != nil {
			continue
		}
		mx, err := checks.ReadInt(filepath.Join(c.dir, "cpufreq/base_frequency"))
		if err != nil || mx <= 0 {
			continue
		}
		a := acc[c.Package]
		if a == nil {
			a = &freqAcc{minKHz: math.Inf(1)}
			acc[c.Package] = a
		}
		a.cur += float64(cur)
		a.base += float64(mx)
		a.n++
		a.minKHz = min(a.minKHz, float64(cur))
	}
}

func (a *freqAcc) readings(o Options) []checks.Reading {
	if a == nil || a.n == 0 {
		return missing(o, o.BaseFreqRatio, "baseFreqRatio")
	}
	return []checks.Reading{
		checks.Value("baseFreqRatio", math.Round(a.cur/a.base*100)/100, o.BaseFreqRatio).In("ratio"),
		checks.Value("minFreqMHz", math.Round(a.minKHz/1000), checks.Limit{}).In("MHz"),
	}
}
