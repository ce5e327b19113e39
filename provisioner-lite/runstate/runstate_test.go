package runstate

import (
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Every status of each enum has one distinct name that parses back to it;
// unknown names and the unspecified value are refused.
func TestStatusNames(t *testing.T) {
	check := func(what string, n int, name func(int32) string, parse func(string) (int32, error)) {
		seen := map[string]bool{}
		for v := int32(1); v < int32(n); v++ {
			nm := name(v)
			if nm == "" || seen[nm] {
				t.Errorf("%s %d: name %q empty or used twice", what, v, nm)
			}
			seen[nm] = true
			if got, err := parse(nm); err != nil || got != v {
				t.Errorf("%s %q parses to %d, %v; want %d", what, nm, got, err, v)
			}
		}
		if name(0) != "" {
			t.Errorf("%s: the unspecified value has name %q", what, name(0))
		}
		for _, bad := range []string{"", "queued", "Running", "RUN_RUNNING"} {
			if _, err := parse(bad); err == nil {
				t.Errorf("%s: %q parses", what, bad)
			}
		}
	}
	check("run status", len(curev1.RunStatus_name), func(v int32) string { return RunName(curev1.RunStatus(v)) },
		func(s string) (int32, error) { v, err := ParseRun(s); return int32(v), err })
	check("phase status", len(curev1.PhaseStatus_name), func(v int32) string { return PhaseName(curev1.PhaseStatus(v)) },
		func(s string) (int32, error) { v, err := ParsePhase(s); return int32(v), err })
	check("verdict status", len(curev1.VerdictStatus_name), func(v int32) string { return VerdictName(curev1.VerdictStatus(v)) },
		func(s string) (int32, error) { v, err := ParseVerdict(s); return int32(v), err })
	if len(RunStatuses) != len(curev1.RunStatus_name)-1 || len(PhaseStatuses) != len(curev1.PhaseStatus_name)-1 || len(VerdictStatuses) != len(curev1.VerdictStatus_name)-1 {
		t.Error("a status list leaves out a value of its enum")
	}
	// Names stored by earlier coordinators read.
	for name, want := range map[string]curev1.RunStatus{"pending": curev1.RunStatus_RUN_PENDING, "attention": curev1.RunStatus_RUN_ATTENTION, "canceled": curev1.RunStatus_RUN_CANCELED} {
		if got, err := ParseRun(name); err != nil || got != want {
			t.Errorf("ParseRun(%q) = %v, %v", name, got, err)
		}
	}
	active := 0
	for _, s := range RunStatuses {
		if Active(s) {
			active++
		}
	}
	if active != 2 || !Active(curev1.RunStatus_RUN_PENDING) || !Active(curev1.RunStatus_RUN_RUNNING) {
		t.Errorf("Active: %d statuses active, want pending and running", active)
	}
}

func TestEventKindsDistinct(t *testing.T) {
	seen := map[EventKind]bool{}
	for _, k := range EventKinds {
		if k == "" || seen[k] {
			t.Errorf("event kind %q empty or listed twice", k)
		}
		seen[k] = true
	}
}
