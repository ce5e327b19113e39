package stresscheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/stressng"
)

func needStressNG(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Skip("stress-ng is not installed (scripts/install-deps.sh installs it)")
	}
}

// topology writes a sysfs root whose online CPUs are the host's first n,
// one per package (a "multi-socket" host stress-ng can really pin to),
// and NUMA nodes as given (node -> cpulist).
func topology(t *testing.T, n int, nodes map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		d := filepath.Join(root, "sys/devices/system/cpu", fmt.Sprintf("cpu%d", i), "topology")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "physical_package_id"), []byte(fmt.Sprintln(i)), 0o644)
		os.WriteFile(filepath.Join(d, "core_id"), []byte("0\n"), 0o644)
	}
	for node, list := range nodes {
		d := filepath.Join(root, "sys/devices/system/node", fmt.Sprintf("node%d", node))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cpulist"), []byte(list+"\n"), 0o644)
	}
	return root
}

func measurement(v checks.Verdict, metric string) (checks.Measurement, bool) {
	for _, m := range v.Measurements {
		if m.Metric == metric {
			return m, true
		}
	}
	return checks.Measurement{}, false
}

// TestCPUPerSocket: the real stress-ng, one run per "socket" pinned to its
// CPU, both at once: a verdict each with bogo-ops/s and no verify failure.
func TestCPUPerSocket(t *testing.T) {
	needStressNG(t)
	n := min(runtime.NumCPU(), 2)
	o := CPUOptions{Root: topology(t, n, nil), Tools: checks.HostTools, TmpDir: t.TempDir(), Duration: 2 * time.Second,
		Method: "matrixprod", BogoOpsPerSec: checks.AtLeast(1)}
	vs, err := CPU(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != n {
		t.Fatalf("%d verdicts for %d sockets: %v", len(vs), n, vs)
	}
	for i, v := range vs {
		if v.Component != fmt.Sprintf("cpu/%d", i) || v.Status != checks.Pass {
			t.Errorf("verdict %v", v)
		}
		m, ok := measurement(v, "cpuBogoOpsPerSec")
		if !ok || m.Unit != "bogo-ops/s" || m.Value <= 0 {
			t.Errorf("%s: cpuBogoOpsPerSec %+v", v.Component, m)
		}
		if !strings.Contains(v.Observed, "verifyFailures=0") || !strings.Contains(v.Expected, "verifyFailures<=0") {
			t.Errorf("%s: observed %q expected %q", v.Component, v.Observed, v.Expected)
		}
	}
	if entries, _ := os.ReadDir(o.TmpDir); len(entries) != 0 {
		t.Errorf("left in the temporary directory: %v", entries)
	}
	o.BogoOpsPerSec = checks.AtLeast(1e15)
	vs, err = CPU(context.Background(), o)
	if err != nil || vs[0].Status != checks.Fail || !strings.Contains(vs[0].Message, "cpuBogoOpsPerSec") {
		t.Errorf("under the bar: %v %v", vs, err)
	}
}

// TestMemoryPerNode: the real stream stressor on the host's CPUs as one
// NUMA node, read and write MiB/s summed over its instances.
func TestMemoryPerNode(t *testing.T) {
	needStressNG(t)
	root := topology(t, 1, map[int]string{0: "0"})
	o := MemoryOptions{Root: root, Tools: checks.HostTools, TmpDir: t.TempDir(), Duration: MinStreamDuration,
		Instances: 1, L3Bytes: 1 << 20, ReadMiBps: checks.AtLeast(1)}
	vs, err := Memory(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Component != "memory/node0" || vs[0].Status != checks.Pass {
		t.Fatalf("verdicts %v", vs)
	}
	for _, metric := range []string{"memReadMiBps", "memWriteMiBps"} {
		if m, ok := measurement(vs[0], metric); !ok || m.Unit != "MiB/s" || m.Value <= 0 {
			t.Errorf("%s %+v (%v)", metric, m, vs[0].Measurements)
		}
	}

	// Buffers of 4 x 64 GiB cannot be had: stress-ng fails, the verdict
	// is an ERROR carrying what it said, not a pass.
	o.L3Bytes = 64 << 30
	vs, err = Memory(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if vs[0].Status != checks.Error || !strings.Contains(vs[0].Message, "cannot allocate") {
		t.Errorf("stressor failure: %v", vs[0])
	}
	if _, err := Memory(context.Background(), MemoryOptions{Root: root, Duration: time.Second}); err == nil {
		t.Error("a stream run too short to report a rate was accepted")
	}
}

// TestVerifyFailureFails: a fail line (what --verify logs on a mismatch)
// is a FAIL naming it, whatever the rate.
func TestVerifyFailureFails(t *testing.T) {
	y, err := os.ReadFile("../../stressng/testdata/cpu-package0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stressng.ParseYAML(y)
	if err != nil {
		t.Fatal(err)
	}
	log := stressng.ParseLog([]byte("stress-ng: fail:  [812] cpu: matrixprod: result mismatch\nstress-ng: error: [811] process [812] (cpu) terminated with an error, exit status=2 (stressor failed)\n"))
	v := judge(group{comp: "cpu/0"}, result{rep: rep, log: log, err: fmt.Errorf("exit status 2")}, "cpu",
		func(m stressng.Metric, _ stressng.Log) []checks.Reading {
			return []checks.Reading{checks.Value("cpuBogoOpsPerSec", m.BogoOpsPerSec, checks.Limit{}).In("bogo-ops/s")}
		})
	if v.Status != checks.Fail || !strings.Contains(v.Message, "verifyFailures=1") || !strings.Contains(v.Message, "result mismatch") {
		t.Errorf("verdict %v", v)
	}
	if m, ok := measurement(v, "cpuBogoOpsPerSec"); !ok || m.Value != 708.087917 {
		t.Errorf("measurement %+v", m)
	}
}

func TestCPULists(t *testing.T) {
	ids, err := parseCPUList("0-3,8,10-11\n")
	if err != nil || !reflect.DeepEqual(ids, []int{0, 1, 2, 3, 8, 10, 11}) {
		t.Errorf("parse %v %v", ids, err)
	}
	if s := cpuList([]int{11, 0, 1, 2, 3, 8, 10}); s != "0-3,8,10-11" {
		t.Errorf("list %s", s)
	}
	for _, bad := range []string{"a", "3-1", "0-", "-1"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestNodes: one group per NUMA node with online CPUs, bound to its
// memory; a single node or none is one unbound group.
func TestNodes(t *testing.T) {
	gs, err := nodes(topology(t, 2, map[int]string{0: "0", 1: "1", 2: ""}))
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].comp != "memory/node0" || gs[0].node != 0 || gs[1].comp != "memory/node1" || gs[1].node != 1 {
		t.Errorf("groups %+v", gs)
	}
	gs, err = nodes(topology(t, 2, nil))
	if err != nil || len(gs) != 1 || gs[0].node != -1 || len(gs[0].cpus) != 2 {
		t.Errorf("no node dir: %+v %v", gs, err)
	}
}
