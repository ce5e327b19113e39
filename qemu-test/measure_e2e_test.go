package qemutest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
)

// measureSuite is a short diagnostic of the tool-bundle checks on the QEMU
// node: fio random reads on its NVMe drive, stress-ng on its CPUs and
// memory, iperf3 to the test's server, and the built-in sequential read.
// Bars are what TCG emulation clears; the test is about the numbers and
// their units reaching the report.
const measureSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: qemu-measure
spec:
  duration: 10m
  checks:
    - name: disk-random
      type: storage-random
      appliesTo: "disk/nvme*"
      duration: 4s
      params: {ioDepth: 8}
      thresholds:
        randReadIOPS: {min: 1}
        p99ReadLatencyUs: {max: 10000000}
    - name: cpu-ops
      type: cpu-throughput
      duration: 4s
      thresholds:
        cpuBogoOpsPerSec: {min: 0.01}
        verifyFailures: {equals: 0}
    - name: memory-rate
      type: memory-bandwidth
      duration: 10s
      params: {instances: 1, l3Size: 1MiB}
      thresholds:
        memReadMiBps: {min: 1}
        verifyFailures: {equals: 0}
    - name: nic-rate
      type: nic-throughput
      duration: 3s
      params: {server: "%s"}
      thresholds:
        throughputMbps: {min: 0.1}
    - name: disk-read
      type: storage-throughput
      appliesTo: "disk/nvme*"
      params: {length: 16MiB}
      thresholds:
        readMBps: {min: 1}
        readbackMismatches: {equals: 0}
`

// TestMeasuredChecksQEMU: a diagnostic whose suite runs fio, stress-ng and
// iperf3 gets the tool bundle from the real coordinator (--tool-bundle,
// content-addressed), verified by the runner, and every measured verdict
// reaches the report with its numbers and units; the disk is not written.
func TestMeasuredChecksQEMU(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	out := outDir(t)
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatal("iperf3 is needed for the test's server (scripts/install-deps.sh)")
	}
	if _, err := os.Stat(harness.ToolBundlePath(out)); err != nil {
		t.Fatalf("the tool bundle is not built (make toolbundle): %v", err)
	}
	env := startEnv(t, harness.Options{ToolBundle: true})
	n := env.Nodes[0]
	before := seedDisk(t, n.Disk, 17)
	// The guest reaches the host's loopback as 10.0.2.2 (QEMU user network).
	port := iperfServer(t)
	suite := fmt.Sprintf(measureSuite, fmt.Sprintf("10.0.2.2:%d", port))
	if err := os.WriteFile(filepath.Join(env.Opts.Work, "manifests", "suites", "qemu-measure.yaml"), []byte(suite), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, n.ID, modes.Diagnostic, "qemu-measure", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fetched := false
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		if strings.Contains(e.GetMessage(), "tool bundle") && strings.Contains(e.GetMessage(), "fetched and verified") {
			fetched = true
		}
		t.Logf("%6.1fs %-6s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("diagnostic ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	if !fetched {
		t.Error("the timeline has no tool bundle fetch")
	}
	want := map[string]map[string]string{ // check component -> metric -> unit
		"disk-random disk/nvme0n1": {"randReadIOPS": "IOPS", "p99ReadLatencyUs": "us", "p50ReadLatencyUs": "us", "randReadMBps": "MB/s"},
		"cpu-ops cpu/0":            {"cpuBogoOpsPerSec": "bogo-ops/s"},
		"memory-rate memory/node0": {"memReadMiBps": "MiB/s", "memWriteMiBps": "MiB/s"},
		"nic-rate nic/eth0":        {"throughputMbps": "Mb/s"},
		"disk-read disk/nvme0n1":   {"readMBps": "MB/s"},
	}
	for _, v := range rep.GetVerdicts() {
		key := v.GetCheck() + " " + v.GetComponent()
		units, ok := want[key]
		if !ok {
			continue
		}
		delete(want, key)
		if v.GetStatus() != curev1.VerdictStatus_PASS {
			t.Errorf("%s: %s: %s (observed %s)", key, v.GetStatus(), v.GetMessage(), v.GetObserved())
		}
		got := map[string]*curev1.Measurement{}
		for _, m := range v.GetMeasurements() {
			got[m.GetMetric()] = m
		}
		for metric, unit := range units {
			m := got[metric]
			if m == nil || m.GetUnit() != unit || m.GetValue() <= 0 {
				t.Errorf("%s: measurement %s = %v, want a positive value in %s (all: %v)", key, metric, m, unit, v.GetMeasurements())
				continue
			}
			t.Logf("%s: %s = %g %s", key, metric, m.GetValue(), m.GetUnit())
		}
	}
	for key := range want {
		t.Errorf("no verdict %s in the report", key)
	}
	if after := fileSum(t, n.Disk); after != before {
		t.Error("the diagnostic changed the disk's bytes")
	}
}

// iperfServer starts a real iperf3 server on the host's loopback for the
// test's life and returns its port.
func iperfServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("iperf3", "--server", "--forceflush", "--bind", "127.0.0.1", "--port", fmt.Sprint(port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Ready when it says so: a probe connection would count as a client.
	stuck := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Server listening on") {
			stuck.Stop()
			go io.Copy(io.Discard, stdout)
			return port
		}
	}
	t.Fatal("iperf3 server exited before listening")
	return 0
}
