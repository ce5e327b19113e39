package suite

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/nvmehealth"
	"github.com/cure-oss/cure/tools/checks/storage"
	"github.com/cure-oss/cure/tools/checks/stresscheck"
	"github.com/cure-oss/cure/tools/nvme"
)

func suitesDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../../../manifests/examples/suites")
}

// TestShippedSuites loads every suite in manifests/examples/suites (and
// qemu-test/testdata/suites) with the strict loader and builds it: every param and threshold must be one the
// checks understand.
func TestShippedSuites(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(suitesDir(), "*.yaml"))
	// The QEMU tests' own suites are held to the same rules.
	qemu, _ := filepath.Glob(filepath.Join(suitesDir(), "../../../qemu-test/testdata/suites/*.yaml"))
	files = append(files, qemu...)
	want := map[string]bool{"rma-quick.yaml": false, "burnin-24h-hgx.yaml": false, "burnin-72h-hgx.yaml": false}
	for _, f := range files {
		doc, err := manifests.LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if doc.Suite == nil {
			t.Errorf("%s: kind %s, want ValidationSuite", f, doc.Kind)
			continue
		}
		cs, err := Build(doc.Suite, Env{Root: t.TempDir(), AllowDiskWrites: true})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var sum time.Duration
		for _, step := range checks.Steps(cs) {
			var longest time.Duration
			for _, c := range step {
				longest = max(longest, c.Duration)
			}
			sum += longest
		}
		for _, c := range cs {
			// appliesTo is a path.Match glob: "*" stops at "/", so
			// "ib/*" would match no port. Each glob must match the id
			// shape its check type produces.
			if ok, _ := path.Match(c.AppliesTo, sample[c.Type]); c.AppliesTo != "" && !ok {
				t.Errorf("%s: check %s: appliesTo %q matches no %s component such as %q", f, c.Name, c.AppliesTo, c.Type, sample[c.Type])
			}
		}
		if d := time.Duration(doc.Suite.Spec.Duration); d > 0 && sum > d {
			t.Errorf("%s: steps add up to %s, over the suite's %s (steps run one after another)", f, sum, d)
		}
		want[filepath.Base(f)] = true
	}
	for f, ok := range want {
		if !ok {
			t.Errorf("%s missing or invalid", f)
		}
	}
}

var sample = map[string]string{
	manifests.CheckNVMeSMART:         "nvme/0",
	manifests.CheckThermal:           "hwmon/coretemp/Package id 0",
	manifests.CheckInfiniBand:        "ib/mlx5_0/1",
	manifests.CheckEthernet:          "nic/ens1f0np0",
	manifests.CheckMemory:            "memory",
	manifests.CheckCPU:               "cpu/0",
	manifests.CheckStorageThroughput: "disk/nvme1n1",
	manifests.CheckGPU:               "gpu/0",
	manifests.CheckStorageRandom:     "disk/nvme1n1",
	manifests.CheckMemoryBandwidth:   "memory/node0",
	manifests.CheckCPUThroughput:     "cpu/0",
	manifests.CheckNICThroughput:     "nic/ens1f0np0",
}

func TestBuildErrors(t *testing.T) {
	s, err := manifests.ParseSuite("bad.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: bad}
spec:
  checks:
    - name: mem
      type: memory
      params: {fraction: 2, pattern: [random]}
    - name: ib
      type: infiniband
      thresholds:
        symbol_errors: {max: 0}
        state: {min: 4}
    - name: disk
      type: storage-throughput
      params: {scratchDevice: nvme1n1}
      thresholds:
        writeMBps: {min: 100}
        readbackMismatches: {max: 5}
    - name: smart
      type: nvme-smart
      thresholds:
        criticalWarning: {max: 1}
    - name: cpu
      type: cpu
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(s, Env{})
	if err == nil {
		t.Fatal("bad suite built")
	}
	for _, want := range []string{
		"spec.checks[0] (mem, type memory): params.fraction: expected a fraction of MemAvailable in (0, 1]",
		"spec.checks[0] (mem, type memory): params.pattern: unknown parameter",
		"spec.checks[1] (ib, type infiniband): thresholds.symbol_errors: unknown metric",
		"spec.checks[1] (ib, type infiniband): thresholds.state: expected {equals: <text>}",
		"spec.checks[2] (disk, type storage-throughput): params.scratchDevice: set without allowWrite",
		"thresholds.writeMBps: set without params.allowWrite",
		"thresholds.readbackMismatches: only {max: 0}",
		"spec.checks[3] (smart, type nvme-smart): thresholds.criticalWarning: only {max: 0}",
		"spec.checks[4] (cpu, type cpu): duration: a cpu stress needs a duration",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

type fakeNVMe struct{ page []byte }

func (f fakeNVMe) AdminCommand(cmd *nvme.Command) (uint32, error) {
	copy(cmd.Data, f.page)
	return 0, nil
}
func (fakeNVMe) Close() error { return nil }

// TestRunQuickSuite runs the shipped RMA suite, with its durations cut to
// milliseconds, against a fixture node: one NVMe drive, one NIC, one hwmon
// sensor, one CPU, one disk and no InfiniBand. It has no tool bundle: the
// measured checks are ERROR, naming the tool they need; the suite's IB and
// GPU checks test nothing on it, which is an ERROR too (rma-quick is for
// GPU servers, where no GPU is the fault).
func TestRunQuickSuite(t *testing.T) {
	s, err := manifests.LoadFile(filepath.Join(suitesDir(), "rma-quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	suite := s.Suite
	for i := range suite.Spec.Stages {
		suite.Spec.Stages[i].Duration = manifests.Duration(100 * time.Millisecond)
	}
	for i := range suite.Spec.Checks {
		c := &suite.Spec.Checks[i]
		if c.Duration > 0 {
			c.Duration = manifests.Duration(100 * time.Millisecond)
		}
		if c.Type == manifests.CheckMemoryBandwidth {
			// The build refuses a stream run too short to report a
			// rate; without a bundle it never starts anyway.
			c.Duration = manifests.Duration(stresscheck.MinStreamDuration)
		}
		if c.Interval > 0 {
			c.Interval = manifests.Duration(20 * time.Millisecond)
		}
		// Throughput of a temp file on a busy CI machine is no bar.
		if _, ok := c.Thresholds["readMBps"]; ok {
			tiny := 0.001
			c.Thresholds["readMBps"] = manifests.Threshold{Min: &tiny}
		}
	}
	root := t.TempDir()
	for p, v := range map[string]string{
		"sys/class/nvme/nvme0/model": "QEMU NVMe Ctrl", "sys/class/nvme/nvme0/serial": "deadbeef",
		"sys/class/nvme/nvme0/firmware_rev": "7.2.22", "sys/class/nvme/nvme0/address": "0000:00:04.0",
		"sys/class/net/eth0/type": "1", "sys/class/net/eth0/operstate": "up", "sys/class/net/eth0/speed": "1000",
		"sys/class/net/eth0/device/vendor": "0x8086",
		"sys/class/hwmon/hwmon0/name":      "nvme", "sys/class/hwmon/hwmon0/temp1_input": "50000", "sys/class/hwmon/hwmon0/temp1_crit": "90000",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0",
		"proc/meminfo": "MemAvailable: 4096 kB",
		"dev/vda":      strings.Repeat("x", 1<<20),
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page := make([]byte, nvme.SMARTLogSize)
	binary.LittleEndian.PutUint16(page[1:], 310)
	page[3], page[4] = 100, 10
	env := Env{
		Root:      root,
		OpenNVMe:  func(string) (nvmehealth.Device, error) { return fakeNVMe{page}, nil },
		Disks:     func() ([]blockdev.Disk, error) { return []blockdev.Disk{{Name: "vda", SizeBytes: 1 << 20}}, nil },
		OpenBlock: func(p string, w bool) (storage.File, error) { return os.Open(p) },
	}
	vs, err := Run(context.Background(), suite, env, checks.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]checks.Status{}
	for _, v := range vs {
		got[v.Check+" "+v.Component] = v.Status
	}
	want := map[string]checks.Status{
		"nvme-health nvme/0":              checks.Pass,
		"hwmon-limits hwmon/nvme/temp1":   checks.Pass,
		"ethernet-links nic/eth0":         checks.Pass,
		"ethernet-links ethernet":         checks.Pass,  // components >= 1
		"infiniband-ports infiniband":     checks.Error, // no IB in this node: tested nothing
		"memory-patterns memory":          checks.Pass,
		"cpu-stress cpu/0":                checks.Pass,
		"disk-read disk/vda":              checks.Pass,
		"gpu-health gpu":                  checks.Error, // Env.GPU nil: no NVML helper, tested nothing
		"disk-random-read storage-random": checks.Error, // no tool bundle
		"memory-stream memory-bandwidth":  checks.Error,
		"cpu-ops cpu-throughput":          checks.Error,
	}
	for k, st := range want {
		if got[k] != st {
			t.Errorf("%s: %s, want %s", k, got[k], st)
		}
	}
	for _, v := range vs {
		switch {
		case v.Status != checks.Error:
		case v.Check == "infiniband-ports" || v.Check == "gpu-health":
			if !strings.Contains(v.Message, "tested nothing") {
				t.Errorf("%s %s: ERROR %q does not say the check tested nothing", v.Check, v.Component, v.Message)
			}
		case !strings.Contains(v.Message, "tool missing") || !strings.Contains(v.Message, "from the tool bundle, and this runner has none"):
			t.Errorf("%s %s: ERROR %q does not say the tool bundle is missing", v.Check, v.Component, v.Message)
		}
	}
	if t.Failed() || len(got) != len(want) {
		for _, v := range vs {
			t.Log(v)
		}
		t.Errorf("%d verdicts, want %d", len(got), len(want))
	}
}

func TestToolCheckErrors(t *testing.T) {
	s, err := manifests.ParseSuite("bad.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: bad}
spec:
  checks:
    - name: rand
      type: storage-random
      params: {blockSize: 1000, scratchLength: 1MiB}
      thresholds:
        randWriteIOPS: {min: 1}
        randReadIOPS: {min: 1}
        readMBps: {min: 1}
    - name: cpu
      type: cpu-throughput
      thresholds:
        verifyFailures: {max: 3}
    - name: mem
      type: memory-bandwidth
      duration: 2s
      params: {l3Size: lots}
    - name: net
      type: nic-throughput
      params: {reverse: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(s, Env{})
	if err == nil {
		t.Fatal("bad suite built")
	}
	for _, want := range []string{
		"spec.checks[0] (rand, type storage-random): params.blockSize: 1000 is not a multiple of 512",
		"spec.checks[0] (rand, type storage-random): params.scratchLength: set without allowWrite",
		"spec.checks[0] (rand, type storage-random): thresholds.randWriteIOPS: set without params.allowWrite",
		"spec.checks[0] (rand, type storage-random): thresholds.readMBps: unknown metric",
		"spec.checks[1] (cpu, type cpu-throughput): thresholds.verifyFailures: only {max: 0}",
		"spec.checks[2] (mem, type memory-bandwidth): duration: 2s is too short",
		`spec.checks[2] (mem, type memory-bandwidth): params.l3Size: "lots" is not a size`,
		"spec.checks[3] (net, type nic-throughput): params.server: the iperf3 server to measure against",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestToolChecksRun runs a suite of the tool-bundle checks: without a
// tool bundle each is an ERROR saying which program it lacks; with the
// host's fio and stress-ng (what the bundle carries), real measurements.
func TestToolChecksRun(t *testing.T) {
	s, err := manifests.ParseSuite("tools.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: tools}
spec:
  checks:
    - name: disk-random
      type: storage-random
      appliesTo: "disk/*"
      duration: 1s
      params: {ioDepth: 4, ioEngine: psync}
      thresholds:
        randReadIOPS: {min: 1}
    - name: cpu-ops
      type: cpu-throughput
      duration: 1s
      params: {method: matrixprod}
      thresholds:
        cpuBogoOpsPerSec: {min: 1}
        verifyFailures: {equals: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Tools(); strings.Join(got, ",") != "fio,stress-ng" {
		t.Errorf("suite tools %v", got)
	}
	root := t.TempDir()
	for p, v := range map[string]string{
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0",
		"dev/vda": strings.Repeat("x", 4<<20),
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := Env{Root: root,
		Disks: func() ([]blockdev.Disk, error) { return []blockdev.Disk{{Name: "vda", SizeBytes: 4 << 20}}, nil }}
	quiet := checks.Options{Log: slog.New(slog.DiscardHandler)}
	vs, err := Run(context.Background(), s, env, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Status != checks.Error || !strings.Contains(v.Message, "from the tool bundle, and this runner has none") {
			t.Errorf("without a bundle: %v", v)
		}
	}
	for _, tool := range []string{"fio", "stress-ng"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
	// In process with the host's programs: what cure-measure does with
	// the bundle's on a node.
	tmp := t.TempDir()
	env.Measure = func(ctx context.Context, r measure.Request) ([]checks.Verdict, error) {
		return measure.Run(ctx, r, checks.HostTools, tmp)
	}
	vs, err = Run(context.Background(), s, env, quiet)
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]string{}
	for _, v := range vs {
		if v.Status != checks.Pass {
			t.Errorf("%v", v)
		}
		for _, m := range v.Measurements {
			units[v.Component+" "+m.Metric] = m.Unit
		}
	}
	if units["disk/vda randReadIOPS"] != "IOPS" || units["disk/vda p99ReadLatencyUs"] != "us" || units["cpu/0 cpuBogoOpsPerSec"] != "bogo-ops/s" {
		t.Errorf("measurements %v", units)
	}
}

// TestBuildStaged: a staged suite's checks carry their stage, and a check
// without its own duration runs for its stage's.
func TestBuildStaged(t *testing.T) {
	doc, err := manifests.LoadFile(filepath.Join(suitesDir(), "../../testdata/staged-suite.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := Build(doc.Suite, Env{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]checks.Check{}
	for _, c := range cs {
		got[c.Name] = c
	}
	for name, want := range map[string]struct {
		stage string
		d     time.Duration
	}{
		"nvme-health-before": {"before", 0},
		"cpu-stress":         {"soak", 2 * time.Hour}, // the stage's
		"disk-read":          {"soak", time.Hour},     // its own
		"nvme-health-after":  {"after", 0},
	} {
		if c := got[name]; c.Stage != want.stage || c.Duration != want.d {
			t.Errorf("%s: stage %q duration %s, want %q %s", name, c.Stage, c.Duration, want.stage, want.d)
		}
	}
	if steps := checks.Steps(cs); len(steps) != 3 || len(steps[1]) != 2 {
		t.Errorf("steps %v: want before, soak (2 checks at once), after", steps)
	}
}

// TestBuildStagedGPU: a gpu check in a stage without its own duration is
// handed to the GPU builder with the stage's (gpu-burn runs that long).
func TestBuildStagedGPU(t *testing.T) {
	s, err := manifests.ParseSuite("staged-gpu.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: staged-gpu}
spec:
  stages:
    - name: soak
      duration: 3h
      checks:
        - name: gpu-burn
          type: gpu
          params: {gpuBurn: true}
        - name: gpu-short
          type: gpu
          duration: 10m
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	gpu := func(c manifests.Check) (checks.Func, error) {
		got[c.Name] = time.Duration(c.Duration)
		return func(context.Context) ([]checks.Verdict, error) { return nil, nil }, nil
	}
	if _, err := Build(s, Env{Root: t.TempDir(), GPU: gpu}); err != nil {
		t.Fatal(err)
	}
	if got["gpu-burn"] != 3*time.Hour || got["gpu-short"] != 10*time.Minute {
		t.Errorf("durations the GPU builder saw: %v, want gpu-burn 3h (its stage's), gpu-short 10m (its own)", got)
	}
}
