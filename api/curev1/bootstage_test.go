package curev1

import (
	"testing"
	"time"
)

func stages(kv ...any) []*BootStage {
	var out []*BootStage
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &BootStage{Name: kv[i].(string), UptimeMs: int64(kv[i+1].(int))})
	}
	return out
}

func TestBootStepsOrdersAndBounds(t *testing.T) {
	got := BootSteps(stages(
		"hello_sent", 5500,
		"init_started", 2660,
		"runner_started", 3110,
		"evil_stage", 100, // unknown: dropped
		"init_started", 1, // second report of a stage: the first counts
		"modules_loaded", -5, // negative: dropped
		"link_up", int(2*time.Hour/time.Millisecond), // beyond an hour: dropped
		"dhcp_bound", 4000,
		"modules_loaded", 3900, // reached before dhcp_bound (they run side by side)
		"inventory_done", 4000, // same time as dhcp_bound: boot order breaks the tie
	))
	want := []BootStep{
		{"init_started", 2660 * time.Millisecond, 2660 * time.Millisecond},
		{"runner_started", 3110 * time.Millisecond, 450 * time.Millisecond},
		{"modules_loaded", 3900 * time.Millisecond, 790 * time.Millisecond},
		{"dhcp_bound", 4000 * time.Millisecond, 100 * time.Millisecond},
		{"inventory_done", 4000 * time.Millisecond, 0},
		{"hello_sent", 5500 * time.Millisecond, 1500 * time.Millisecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := FormatBootSteps(got[:2]); s != "init_started=2.66s(+2.66s) runner_started=3.11s(+0.45s)" {
		t.Errorf("FormatBootSteps = %q", s)
	}
}

func TestBootStepsOverlongListIgnored(t *testing.T) {
	var kv []any
	for i := 0; i < MaxBootStages+1; i++ {
		kv = append(kv, "hello_sent", i)
	}
	if got := BootSteps(stages(kv...)); got != nil {
		t.Fatalf("overlong list gave %+v", got)
	}
}

func FuzzBootSteps(f *testing.F) {
	f.Add("init_started", int64(2000), "hello_sent", int64(5000))
	f.Add("hello_sent", int64(-1), "hello_sent", int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, n1 string, u1 int64, n2 string, u2 int64) {
		steps := BootSteps([]*BootStage{{Name: n1, UptimeMs: u1}, {Name: n2, UptimeMs: u2}})
		var prev time.Duration
		for _, s := range steps {
			if s.Took < 0 || s.Uptime < prev || s.Uptime > MaxBootUptime {
				t.Fatalf("bad step %+v after %v", s, prev)
			}
			prev = s.Uptime
		}
	})
}
