package cpustress

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
)

// topology: cpu0..3, two packages, SMT siblings (0,1) and (2,3) share a core.
func fixture(t *testing.T) string {
	root := t.TempDir()
	put := func(p, v string) {
		full := filepath.Join(root, "sys/devices/system/cpu", p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct{ pkg, core, cur string }{{"0", "0", "2900000"}, {"0", "0", "2900000"}, {"1", "0", "1500000"}, {"1", "0", "1500000"}} {
		d := "cpu" + string(rune('0'+i)) + "/"
		put(d+"topology/physical_package_id", c.pkg)
		put(d+"topology/core_id", c.core)
		put(d+"cpufreq/scaling_cur_freq", c.cur)
		put(d+"cpufreq/base_frequency", "2000000")
		put(d+"thermal_throttle/core_throttle_count", "5")
		put(d+"thermal_throttle/package_throttle_count", "9")
		if i > 0 {
			put(d+"online", "1")
		}
	}
	put("cpu4/online", "0")      // offline: not loaded, not judged
	put("cpufreq/policy0/x", "") // non-cpu entries are ignored
	return root
}

func TestCPUStress(t *testing.T) {
	root := fixture(t)
	pinned := make(chan int, 8)
	o := Options{
		Root: root, Duration: 200 * time.Millisecond, SampleEvery: 20 * time.Millisecond,
		Throttle: checks.AtMost(0), BaseFreqRatio: checks.AtLeast(0.95),
		Pin: func(cpu int) error { pinned <- cpu; return nil },
		afterLoad: func() {
			// Package 1 throttled during the load: both SMT siblings report
			// the shared core counter (+3) and the package counter (+2).
			for _, c := range []string{"cpu2", "cpu3"} {
				d := filepath.Join(root, "sys/devices/system/cpu", c, "thermal_throttle")
				os.WriteFile(filepath.Join(d, "core_throttle_count"), []byte("8\n"), 0o644)
				os.WriteFile(filepath.Join(d, "package_throttle_count"), []byte("11\n"), 0o644)
			}
		},
	}
	vs, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(pinned) != 4 {
		t.Errorf("%d workers pinned, want one per online cpu (4)", len(pinned))
	}
	if len(vs) != 2 {
		t.Fatalf("verdicts %v, want one per package", vs)
	}
	p0, p1 := vs[0], vs[1]
	if p0.Component != "cpu/0" || p0.Status != checks.Pass || !strings.Contains(p0.Observed, "computeErrors=0 cpus=2 coreThrottle=0 packageThrottle=0 baseFreqRatio=1.45 minFreqMHz=2900") {
		t.Errorf("package 0: %s", p0)
	}
	if p1.Component != "cpu/1" || p1.Status != checks.Fail ||
		!strings.Contains(p1.Message, "coreThrottle=3 outside coreThrottle<=0") ||
		!strings.Contains(p1.Message, "packageThrottle=2 outside") ||
		!strings.Contains(p1.Message, "baseFreqRatio=0.75 outside baseFreqRatio>=0.95") {
		t.Errorf("package 1: %s", p1)
	}
}

func TestCPUStressWithoutTelemetry(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys/devices/system/cpu/cpu0"), 0o755)
	o := Options{Root: root, Duration: 50 * time.Millisecond, Throttle: checks.AtMost(0), BaseFreqRatio: checks.AtLeast(0.9),
		Pin: func(int) error { return nil }}
	vs, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// A VM has neither cpufreq nor therm_throt: reported, not failed...
	if vs[0].Status != checks.Pass || !strings.Contains(vs[0].Observed, "coreThrottle=n/a") || !strings.Contains(vs[0].Observed, "baseFreqRatio=n/a") {
		t.Errorf("VM verdict %s", vs[0])
	}
	// ...unless the suite requires them (bare metal).
	o.RequireTelemetry = true
	vs, err = Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if vs[0].Status != checks.Fail || !strings.Contains(vs[0].Message, "baseFreqRatio not reported") {
		t.Errorf("required telemetry verdict %s", vs[0])
	}
	if _, err := Check(context.Background(), Options{Root: root}); err == nil {
		t.Error("zero duration accepted")
	}
}

func TestWorkIsDeterministic(t *testing.T) {
	if work(seedFor(0)) != work(seedFor(0)) || work(seedFor(0)) == work(seedFor(1)) {
		t.Error("work is not a pure function of its seed")
	}
}
