package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// The coordinator's memory grows with the fleet it serves: per connected
// node a gRPC connection and session (4 goroutines, sessionloop.go), a
// run driver and the run's state; measured at 5,000 and 10,000 nodes, a
// live heap of 51–63 KiB and about 40 KiB of goroutine stacks a node
// (docs/BENCHMARKS.md). Go's default GC lets the heap grow to twice the
// live heap with no bound, and RSS was 3.6× the live heap. The plan
// (docs/OPERATIONS.md, Memory) bounds it by the fleet instead.
const (
	// memoryBase is the coordinator's own working set without nodes
	// (38 MiB RSS measured with one) with room for an import or a burst.
	memoryBase = 128 << 20
	// memoryPerNode is a node's working set (about 95 KiB) with the GC's
	// headroom over it (about 2/3 of it): the GC runs about as often as at
	// GOGC 100 on the live heap, and the heap stays under the limit.
	memoryPerNode = 160 << 10
	// gcPercent is the GC target: Go's default. Under the limit the heap
	// goal is twice the live heap or the limit, whichever is lower, so the
	// target tightens as the fleet fills its limit. 200 was measured at 300
	// nodes (bench-fleet, same hour): RSS 204 MiB against 162, CPU per node
	// the same (73.7 ms against 73.3): headroom costs memory where the GC
	// is cheap, and the limit governs where it is not.
	gcPercent = 100
)

// MemoryPlan is the Go runtime's memory settings for a fleet.
type MemoryPlan struct {
	Limit     int64 // bytes (debug.SetMemoryLimit); math.MaxInt64: none
	GCPercent int   // debug.SetGCPercent
	Why       string
}

// PlanMemory is the memory limit and GC target for nodes nodes on a host
// (or cgroup) of host bytes (0: unknown). override is --memory-limit:
// bytes, 0 to plan from the fleet, negative for no limit. The limit is
// 128 MiB + 160 KiB a node, at most 3/4 of the host; the GC target is
// Go's 100.
func PlanMemory(nodes int, host, override int64) MemoryPlan {
	switch {
	case override > 0:
		return MemoryPlan{Limit: override, GCPercent: gcPercent, Why: "--memory-limit"}
	case override < 0:
		return MemoryPlan{Limit: math.MaxInt64, GCPercent: gcPercent, Why: "--memory-limit off"}
	}
	nodes = max(nodes, 0)
	limit := memoryBase + int64(nodes)*memoryPerNode
	why := fmt.Sprintf("128 MiB + 160 KiB x %d nodes", nodes)
	if host > 0 && limit > host/4*3 {
		limit = host / 4 * 3
		why = fmt.Sprintf("3/4 of the host's %d MiB (the fleet's %d nodes would want more)", host>>20, nodes)
	}
	return MemoryPlan{Limit: limit, GCPercent: gcPercent, Why: why}
}

// hostMemory is the memory the process may use: the cgroup's limit where
// one is set, else the machine's (0: unknown).
func hostMemory() int64 {
	total := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total = memTotal(b)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(f); err == nil {
			if n := cgroupLimit(b); n > 0 && (total == 0 || n < total) {
				total = n
			}
		}
	}
	return total
}

// memTotal is /proc/meminfo's MemTotal in bytes (0: not there).
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 && kb < math.MaxInt64>>10 {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit is a cgroup memory limit file's bytes (0: none, "max", or
// v1's "no limit", a number near 2^63).
func cgroupLimit(b []byte) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64>>1 {
		return 0
	}
	return n
}

// tuneMemory applies the memory plan now and, where it follows the
// store's node count, every minute.
func (d *daemon) tuneMemory(ctx context.Context) {
	if !d.c.TuneMemory {
		return
	}
	m := &memoryTuner{fleetSize: d.c.FleetSize, override: d.c.MemoryLimit, host: hostMemory(),
		envLimit: os.Getenv("GOMEMLIMIT") != "", envGC: os.Getenv("GOGC") != "", count: d.st.NodeCount, log: d.log}
	m.tune(ctx)
	if m.replans() {
		go m.loop(ctx, time.Minute)
	}
}

// memoryTuner applies the plan: from the store's node count unless
// --fleet-size fixes it; GOMEMLIMIT, when set, stays the limit unless
// --memory-limit is given, and GOGC, when set, stays the GC target.
type memoryTuner struct {
	fleetSize int   // --fleet-size (0: the store's node count)
	override  int64 // --memory-limit
	host      int64
	envLimit  bool // GOMEMLIMIT was set (--memory-limit beats it)
	envGC     bool // GOGC was set: the GC target is left to it
	count     func(context.Context) (int, error)
	log       *slog.Logger
	applied   MemoryPlan
}

// tune plans and applies the settings; it logs a change.
func (m *memoryTuner) tune(ctx context.Context) {
	nodes := m.fleetSize
	var p MemoryPlan
	switch {
	case m.envLimit && m.override == 0:
		limit := debug.SetMemoryLimit(-1) // GOMEMLIMIT's, which the runtime read
		p = MemoryPlan{Limit: limit, GCPercent: gcPercent, Why: "GOMEMLIMIT"}
	case nodes <= 0 && m.override == 0:
		n, err := m.count(ctx)
		if err != nil {
			m.log.Warn("memory plan: node count", "err", err)
			return
		}
		nodes = n
		fallthrough
	default:
		p = PlanMemory(nodes, m.host, m.override)
		debug.SetMemoryLimit(p.Limit)
	}
	if p == m.applied {
		return
	}
	if !m.envGC {
		debug.SetGCPercent(p.GCPercent)
	}
	m.applied = p
	gc := strconv.Itoa(p.GCPercent)
	if m.envGC {
		gc = "GOGC=" + os.Getenv("GOGC") // the environment's, left alone
	}
	m.log.Info("memory plan", "limit_mib", p.Limit>>20, "gc_percent", gc, "why", p.Why, "nodes", nodes, "host_mib", m.host>>20)
}

// replans says whether the plan follows the store's node count, which
// changes at run time (nodes added and removed).
func (m *memoryTuner) replans() bool {
	return m.fleetSize <= 0 && m.override == 0 && !m.envLimit
}

// loop re-plans every period until ctx ends.
func (m *memoryTuner) loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.tune(ctx)
		}
	}
}
