package telemetry

import (
	"bufio"
	"bytes"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/cpustress"
	"github.com/cure-oss/cure/tools/checks/thermal"
)

// CPUChips are the hwmon drivers whose sensors are a CPU's own (Intel
// coretemp, AMD k10temp and zenpower, the x86 package thermal zone, Arm
// SoCs' cpu_thermal): cpuTempMaxC bars them, and they are sampled first.
var CPUChips = []string{"coretemp", "k10temp", "zenpower", "x86_pkg_temp", "cpu_thermal", "peci_cputemp"}

// IsCPUChip says whether an hwmon chip is one of CPUChips.
func IsCPUChip(chip string) bool { return slices.Contains(CPUChips, chip) }

// hostReader reads the host's files; it keeps the previous counters to
// turn them into per-interval values.
type hostReader struct {
	root    string
	sensors []thermal.Sensor
	cpus    []cpustress.CPU
	pkgs    []int
	// previous readings: throttle counters per CPU, /proc/stat per CPU
	prevThrottle map[int]throttleCount
	prevStat     map[int]cpuTimes
	reads        int
}

type throttleCount struct{ core, pkg uint64 }

// newHostReader lists what the host offers and says what it lacks.
func newHostReader(root string) (*hostReader, []string) {
	h := &hostReader{root: root}
	var notes []string
	sensors, err := thermal.Sensors(root)
	switch {
	case err != nil:
		notes = append(notes, fmt.Sprintf("hwmon not sampled: %v", err))
	case len(sensors) == 0:
		notes = append(notes, "no hwmon temperature sensor on this node")
	}
	// CPU chips first: they are what the CPU bars need.
	slices.SortStableFunc(sensors, func(a, b thermal.Sensor) int {
		ca, cb := IsCPUChip(a.Chip), IsCPUChip(b.Chip)
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	if len(sensors) > MaxHwmonSensors {
		notes = append(notes, fmt.Sprintf("%d hwmon sensors: the first %d sampled (CPU sensors first)", len(sensors), MaxHwmonSensors))
		sensors = sensors[:MaxHwmonSensors]
	}
	h.sensors = sensors
	cpus, err := cpustress.CPUs(root)
	if err != nil {
		notes = append(notes, fmt.Sprintf("CPUs not sampled: %v", err))
	}
	h.cpus = cpus
	seen := map[int]bool{}
	for _, c := range cpus {
		if !seen[c.Package] {
			seen[c.Package] = true
			h.pkgs = append(h.pkgs, c.Package)
		}
	}
	slices.Sort(h.pkgs)
	if len(cpus) > 0 {
		if _, err := os.Stat(h.cpuFile(cpus[0].ID, "cpufreq/scaling_cur_freq")); err != nil {
			notes = append(notes, "no cpufreq on this node: CPU clocks not sampled")
		}
		if _, err := os.Stat(h.cpuFile(cpus[0].ID, "thermal_throttle/core_throttle_count")); err != nil {
			notes = append(notes, "no thermal_throttle counters on this node: CPU throttling not sampled")
		}
	}
	// Baselines: the first read gives the counters the intervals start from.
	h.prevThrottle = h.readThrottle()
	h.prevStat, _ = readProcStat(filepath.Join(root, "proc/stat"))
	return h, notes
}

func (h *hostReader) cpuFile(id int, rel string) string {
	return filepath.Join(h.root, "sys/devices/system/cpu", fmt.Sprintf("cpu%d", id), rel)
}

// read takes one sample of everything the host offers.
func (h *hostReader) read() []Reading {
	var out []Reading
	host := func(comp, metric, unit string, v float64) {
		out = append(out, Reading{Source: SourceHost, Component: comp, Metric: metric, Unit: unit, Value: v})
	}
	for _, s := range h.sensors {
		if v, err := checks.ReadInt(s.Attr("input")); err == nil {
			host(s.Component, MetricTemp, UnitC, float64(v)/1000)
		}
		if v, err := checks.ReadInt(s.Attr("crit")); err == nil {
			host(s.Component, MetricTempCrit, UnitC, float64(v)/1000)
		}
		if v, err := checks.ReadInt(s.Attr("max")); err == nil {
			host(s.Component, MetricTempMax, UnitC, float64(v)/1000)
		}
	}
	if len(h.cpus) == 0 {
		return out
	}
	clocks := h.readClocks()
	th := h.readThrottleEvents()
	defer func() { h.reads++ }()
	busy := h.readBusy()
	for _, p := range h.pkgs {
		comp := fmt.Sprintf("cpu/%d", p)
		if b := busy[p]; b != nil && b.total > 0 {
			host(comp, MetricBusy, UnitPct, 100*float64(b.busy)/float64(b.total))
		}
		if a := clocks[p]; a != nil && a.n > 0 {
			host(comp, MetricClock, UnitMHz, a.cur/float64(a.n)/1000)
		}
		if a := clocks[p]; a != nil && a.nb > 0 {
			host(comp, MetricBaseClock, UnitMHz, a.base/float64(a.nb)/1000)
		}
		if th.ok[p] && h.reads > 0 { // the first read only sets the baseline
			host(comp, MetricThrottled, UnitEvents, th.events[p]+float64(th.pkgMax[p]))
		}
	}
	return out
}

// clockAcc sums a package's current and base clocks (kHz) over its CPUs.
type clockAcc struct {
	cur, base float64
	n, nb     int
}

// readClocks is each package's current and base clocks, to average.
func (h *hostReader) readClocks() map[int]*clockAcc {
	clocks := map[int]*clockAcc{}
	for _, c := range h.cpus {
		a := clocks[c.Package]
		if a == nil {
			a = &clockAcc{}
			clocks[c.Package] = a
		}
		if cur, err := checks.ReadInt(h.cpuFile(c.ID, "cpufreq/scaling_cur_freq")); err == nil && cur > 0 {
			a.cur += float64(cur)
			a.n++
		}
		if base, ok := h.baseKHz(c.ID); ok {
			a.base += base
			a.nb++
		}
	}
	return clocks
}

// throttleEvents are, per package, the core throttle events in the
// interval and the package counter's growth; ok where both reads had them.
type throttleEvents struct {
	events map[int]float64
	pkgMax map[int]uint64
	ok     map[int]bool
}

// readThrottleEvents counts throttling since the previous read: SMT
// siblings' shared core counter counted once, the package counter once.
func (h *hostReader) readThrottleEvents() throttleEvents {
	now := h.readThrottle()
	t := throttleEvents{events: map[int]float64{}, pkgMax: map[int]uint64{}, ok: map[int]bool{}}
	coreSeen := map[[2]int]bool{}
	for _, c := range h.cpus {
		cur, ok1 := now[c.ID]
		prev, ok2 := h.prevThrottle[c.ID]
		if !ok1 || !ok2 {
			continue
		}
		t.ok[c.Package] = true
		if k := [2]int{c.Package, c.Core}; !coreSeen[k] {
			coreSeen[k] = true
			t.events[c.Package] += float64(delta(cur.core, prev.core))
		}
		t.pkgMax[c.Package] = max(t.pkgMax[c.Package], delta(cur.pkg, prev.pkg))
	}
	h.prevThrottle = now
	return t
}

type busyAcc struct{ busy, total uint64 }

// readBusy is each package's utilisation from /proc/stat since the
// previous read.
func (h *hostReader) readBusy() map[int]*busyAcc {
	pkgOf := map[int]int{}
	for _, c := range h.cpus {
		pkgOf[c.ID] = c.Package
	}
	stat, _ := readProcStat(filepath.Join(h.root, "proc/stat"))
	busy := map[int]*busyAcc{}
	for id, cur := range stat {
		prev, ok := h.prevStat[id]
		pkg, known := pkgOf[id]
		if !ok || !known || cur.total < prev.total || cur.busy < prev.busy {
			continue
		}
		b := busy[pkg]
		if b == nil {
			b = &busyAcc{}
			busy[pkg] = b
		}
		b.busy += cur.busy - prev.busy
		b.total += cur.total - prev.total
	}
	if stat != nil {
		h.prevStat = stat
	}
	return busy
}

// baseKHz is a CPU's base clock: base_frequency (intel_pstate), else
// cpuinfo_max_freq (other drivers publish no base; with turbo that is the
// highest clock, a stricter bar).
func (h *hostReader) baseKHz(id int) (float64, bool) {
	for _, f := range []string{"cpufreq/base_frequency", "cpufreq/cpuinfo_max_freq"} {
		if v, err := checks.ReadInt(h.cpuFile(id, f)); err == nil && v > 0 {
			return float64(v), true
		}
	}
	return 0, false
}

// readThrottle reads the x86 therm_throt counters of every CPU that has
// them.
func (h *hostReader) readThrottle() map[int]throttleCount {
	out := map[int]throttleCount{}
	for _, c := range h.cpus {
		core, err1 := checks.ReadUint(h.cpuFile(c.ID, "thermal_throttle/core_throttle_count"))
		pkg, err2 := checks.ReadUint(h.cpuFile(c.ID, "thermal_throttle/package_throttle_count"))
		if err1 == nil && err2 == nil {
			out[c.ID] = throttleCount{core: core, pkg: pkg}
		}
	}
	return out
}

// delta is a counter's increase; a counter that went back (reset) counts
// from zero.
func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// cpuTimes are one CPU's /proc/stat jiffies: busy (user, nice, system,
// irq, softirq, steal) and total (busy, idle, iowait).
type cpuTimes struct{ busy, total uint64 }

// readProcStat reads the per-CPU lines of /proc/stat (nil when absent).
func readProcStat(path string) (map[int]cpuTimes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseProcStat(b), nil
}

// parseProcStat reads the "cpuN user nice system idle iowait irq softirq
// steal ..." lines of /proc/stat (proc(5)); lines it cannot read are
// skipped. guest and guest_nice are already in user and nice.
func parseProcStat(b []byte) map[int]cpuTimes {
	out := map[int]cpuTimes{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		id, err := strconv.Atoi(f[0][3:])
		if err != nil || id < 0 {
			continue
		}
		var v [8]uint64
		ok := true
		for i := 1; i < len(f) && i <= 8; i++ {
			if v[i-1], err = strconv.ParseUint(f[i], 10, 64); err != nil {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		// busy: user, nice, system, irq, softirq, steal; total adds idle
		// and iowait. A line whose sums overflow is garbage.
		busy, ok1 := sum(v[0], v[1], v[2], v[5], v[6], v[7])
		total, ok2 := sum(busy, v[3], v[4])
		if !ok1 || !ok2 {
			continue
		}
		out[id] = cpuTimes{busy: busy, total: total}
	}
	return out
}

// sum adds without overflow, saying whether it fitted.
func sum(xs ...uint64) (uint64, bool) {
	var t, carry uint64
	for _, x := range xs {
		t, carry = bits.Add64(t, x, 0)
		if carry != 0 {
			return 0, false
		}
	}
	return t, true
}
