// Package stresscheck measures CPU throughput and memory bandwidth with
// stress-ng, the reference stressor suite, with its --verify on: the cpu
// stressor checks its computations, the stream stressor its arrays, and a
// mismatch is a FAIL naming what stress-ng said. CPU: one stress-ng per
// socket, pinned to that socket's CPUs, all sockets at once; a verdict per
// socket (cpu/<package>) with bogo-ops/s. Memory: one stress-ng --stream
// per NUMA node, pinned to the node's CPUs and its memory, all nodes at
// once; a verdict per node (memory/node<N>) with read and write MiB/s.
package stresscheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/cpustress"
	"github.com/cure-oss/cure/tools/stressng"
)

// MinStreamDuration: stress-ng's stream stressor reports no memory rate
// for an instance that ran under 4.5 s, and instances start late on a
// loaded or emulated machine: the check asks for twice that.
const MinStreamDuration = 10 * time.Second

// CPUOptions configure the CPU throughput check.
type CPUOptions struct {
	Root   string       // holds sys/devices/system/cpu
	Tools  checks.Tools `json:"-"`
	TmpDir string       // stress-ng's working directory and YAML files
	// Duration of the load (default 60s).
	Duration time.Duration
	// Method is the cpu stressor's --cpu-method (default all: every
	// method in turn, each verified).
	Method string
	// BogoOpsPerSec bars each socket's throughput.
	BogoOpsPerSec checks.Limit
}

// MemoryOptions configure the memory bandwidth check.
type MemoryOptions struct {
	Root   string       // holds sys/devices/system/{cpu,node}
	Tools  checks.Tools `json:"-"`
	TmpDir string
	// Duration of the load (default 60s, at least MinStreamDuration).
	Duration time.Duration
	// Instances per node (default: one per CPU of the node).
	Instances int
	// L3Bytes overrides the cache size stress-ng sizes its arrays by
	// (4 x L3 each); 0 lets stress-ng read it.
	L3Bytes uint64
	// ReadMiBps and WriteMiBps bar each node's aggregate rates.
	ReadMiBps, WriteMiBps checks.Limit
}

// group is one stress-ng run: a socket or a NUMA node.
type group struct {
	comp      string
	cpus      []int
	node      int // -1: no memory binding
	instances int
}

type result struct {
	rep *stressng.Report
	log stressng.Log
	err error
}

// CPU runs the cpu stressor per socket.
func CPU(ctx context.Context, o CPUOptions) ([]checks.Verdict, error) {
	cpus, err := cpustress.CPUs(o.Root)
	if err != nil {
		return nil, err
	}
	byPkg := map[int][]int{}
	for _, c := range cpus {
		byPkg[c.Package] = append(byPkg[c.Package], c.ID)
	}
	var gs []group
	for pkg, ids := range byPkg {
		gs = append(gs, group{comp: fmt.Sprintf("cpu/%d", pkg), cpus: ids, node: -1})
	}
	method := o.Method
	if method == "" {
		method = "all"
	}
	dur := orDefault(o.Duration, time.Minute)
	res := runAll(ctx, o.Tools, o.TmpDir, gs, func(g group, yaml string) []string {
		return []string{"--cpu", strconv.Itoa(len(g.cpus)), "--taskset", cpuList(g.cpus), "--cpu-method", method,
			"--verify", "--metrics", "--timeout", seconds(dur), "--yaml", yaml}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []checks.Verdict
	for i, g := range gs {
		out = append(out, judge(g, res[i], "cpu", func(m stressng.Metric, _ stressng.Log) []checks.Reading {
			return []checks.Reading{
				checks.Value("cpuBogoOpsPerSec", round2(m.BogoOpsPerSec), o.BogoOpsPerSec).In("bogo-ops/s"),
				checks.Value("cpus", float64(len(g.cpus)), checks.Limit{}),
			}
		}))
	}
	return sorted(out), nil
}

// Memory runs the stream stressor per NUMA node.
func Memory(ctx context.Context, o MemoryOptions) ([]checks.Verdict, error) {
	dur := orDefault(o.Duration, time.Minute)
	if dur < MinStreamDuration {
		return nil, fmt.Errorf("stresscheck: memory bandwidth needs a run of at least %s, found %s", MinStreamDuration, dur)
	}
	gs, err := nodes(o.Root)
	if err != nil {
		return nil, err
	}
	for i := range gs {
		gs[i].instances = o.Instances
		if gs[i].instances <= 0 {
			gs[i].instances = len(gs[i].cpus)
		}
	}
	res := runAll(ctx, o.Tools, o.TmpDir, gs, func(g group, yaml string) []string {
		a := []string{"--stream", strconv.Itoa(g.instances), "--taskset", cpuList(g.cpus)}
		if g.node >= 0 {
			a = append(a, "--mbind", strconv.Itoa(g.node))
		}
		if o.L3Bytes > 0 {
			a = append(a, "--stream-l3-size", strconv.FormatUint(o.L3Bytes, 10))
		}
		return append(a, "--verify", "--metrics", "--timeout", seconds(dur), "--yaml", yaml)
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []checks.Verdict
	for i, g := range gs {
		n := g.instances
		measured := false
		v := judge(g, res[i], "stream", func(m stressng.Metric, l stressng.Log) []checks.Reading {
			rd, wr, ok := memRates(m, l, n)
			if !ok {
				return nil
			}
			measured = true
			return []checks.Reading{
				checks.Value("memReadMiBps", round2(rd), o.ReadMiBps).In("MiB/s"),
				checks.Value("memWriteMiBps", round2(wr), o.WriteMiBps).In("MiB/s"),
				checks.Value("instances", float64(n), checks.Limit{}),
			}
		})
		if !measured && v.Status == checks.Pass {
			v.Status = checks.Error
			v.Message = "stress-ng reported no memory rate: its stream stressor reports one only for an instance that ran 4.5 s or more (give the check a longer duration)"
		}
		out = append(out, v)
	}
	return sorted(out), nil
}

// memRates sums the per-instance rates stress-ng logged; without one line
// per instance it falls back to the YAML's mean rate times the instances.
func memRates(m stressng.Metric, l stressng.Log, n int) (float64, float64, bool) {
	var rd, wr float64
	seen := map[int]bool{}
	for _, r := range l.Rates {
		if r.Stressor == "stream" && !seen[r.Instance] {
			seen[r.Instance] = true
			rd += r.ReadMiBps
			wr += r.WriteMiBps
		}
	}
	if len(seen) == n {
		return rd, wr, true
	}
	mr, ok1 := m.Extra["memory-read-rate-mb-per-sec"]
	mw, ok2 := m.Extra["memory-write-rate-mb-per-sec"]
	return mr * float64(n), mw * float64(n), ok1 && ok2
}

// judge turns one run into its group's verdict: ERROR when stress-ng did
// not measure, FAIL on a fail line (a --verify mismatch) or a bar.
func judge(g group, r result, stressor string, read func(stressng.Metric, stressng.Log) []checks.Reading) checks.Verdict {
	fails := 0
	for _, p := range r.log.Problems {
		if strings.HasPrefix(p, "fail: ") {
			fails++
		}
	}
	var m stressng.Metric
	ok := r.rep != nil
	if ok {
		m, ok = r.rep.Stressor(stressor)
	}
	if !ok || (r.err != nil && fails == 0) {
		msg := "stress-ng reported no " + stressor + " metrics"
		if r.err != nil {
			msg = r.err.Error()
		}
		if len(r.log.Problems) > 0 {
			msg += "; " + strings.Join(r.log.Problems, "; ")
		}
		return checks.Verdict{Component: g.comp, Status: checks.Error, Message: msg}
	}
	rs := append(read(m, r.log), checks.Value("verifyFailures", float64(fails), checks.AtMost(0)))
	v := checks.Judge(g.comp, rs...)
	if fails > 0 {
		v.Message = strings.TrimPrefix(v.Message+"; "+strings.Join(r.log.Problems, "; "), "; ")
	}
	return v
}

// runAll starts one stress-ng per group at once and waits for all.
func runAll(ctx context.Context, tools checks.Tools, tmp string, gs []group, args func(group, string) []string) []result {
	if tmp == "" {
		tmp = os.TempDir()
	}
	res := make([]result, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = runOne(ctx, tools, tmp, g, args)
		}()
	}
	wg.Wait()
	return res
}

func runOne(ctx context.Context, tools checks.Tools, tmp string, g group, args func(group, string) []string) result {
	if tools == nil {
		return result{err: fmt.Errorf("no way to run stress-ng")}
	}
	dir, err := os.MkdirTemp(tmp, "stress-ng-")
	if err != nil {
		return result{err: err}
	}
	defer os.RemoveAll(dir)
	yaml := filepath.Join(dir, "out.yaml")
	cmd, err := tools(ctx, "stress-ng", args(g, yaml)...)
	if err != nil {
		return result{err: err}
	}
	// stress-ng makes its temporary files in the working directory.
	cmd.Dir = dir
	_, stderr, runErr := checks.RunTool(cmd)
	r := result{log: stressng.ParseLog(stderr), err: runErr}
	if b, err := os.ReadFile(yaml); err == nil {
		rep, perr := stressng.ParseYAML(b)
		if perr != nil && r.err == nil {
			r.err = perr
		}
		r.rep = rep
	} else if r.err == nil {
		r.err = fmt.Errorf("stress-ng wrote no YAML: %w", err)
	}
	return r
}

// nodes lists the NUMA nodes with CPUs (memory-only nodes have no CPU to
// run the stream on); without a node directory, one group of every online
// CPU and no memory binding.
func nodes(root string) ([]group, error) {
	cpus, err := cpustress.CPUs(root)
	if err != nil {
		return nil, err
	}
	online := map[int]bool{}
	var all []int
	for _, c := range cpus {
		online[c.ID] = true
		all = append(all, c.ID)
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/node/node[0-9]*"))
	var gs []group
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		s, err := checks.ReadString(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("stresscheck: NUMA node %d: %w", n, err)
		}
		ids, err := parseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("stresscheck: NUMA node %d cpulist: %w", n, err)
		}
		var on []int
		for _, id := range ids {
			if online[id] {
				on = append(on, id)
			}
		}
		if len(on) > 0 {
			gs = append(gs, group{comp: fmt.Sprintf("memory/node%d", n), cpus: on, node: n})
		}
	}
	if len(gs) == 0 {
		return []group{{comp: "memory/node0", cpus: all, node: -1}}, nil
	}
	if len(gs) == 1 {
		gs[0].node = -1 // one node: binding changes nothing
	}
	return gs, nil
}

// parseCPUList reads the kernel's list format: "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
		}
		if a < 0 || b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("%q: bad range %s", s, part)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// cpuList writes ids (sorted) in the list format --taskset takes.
func cpuList(ids []int) string {
	s := append([]int(nil), ids...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func seconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s"
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func sorted(vs []checks.Verdict) []checks.Verdict {
	sort.Slice(vs, func(i, j int) bool { return vs[i].Component < vs[j].Component })
	return vs
}
