package runstate

import "testing"

// Each set holds distinct names, and validation accepts exactly its members.
func TestSets(t *testing.T) {
	for name, set := range map[string][]string{"run statuses": RunStatuses, "phase statuses": PhaseStatuses, "event kinds": EventKinds} {
		seen := map[string]bool{}
		for _, s := range set {
			if s == "" || seen[s] {
				t.Errorf("%s: %q empty or listed twice", name, s)
			}
			seen[s] = true
		}
	}
	for _, s := range RunStatuses {
		if !ValidRun(s) {
			t.Errorf("ValidRun(%q) = false", s)
		}
	}
	for _, s := range PhaseStatuses {
		if !ValidPhase(s) {
			t.Errorf("ValidPhase(%q) = false", s)
		}
	}
	for _, s := range []string{"", "queued", "Running", "ok"} {
		if ValidRun(s) {
			t.Errorf("ValidRun(%q) = true", s)
		}
	}
	if ValidPhase("succeeded") || ValidPhase("") {
		t.Error("ValidPhase accepts a run status or empty")
	}
	active := 0
	for _, s := range RunStatuses {
		if Active(s) {
			active++
		}
	}
	if active != 2 || !Active(RunPending) || !Active(RunRunning) {
		t.Errorf("Active: %d statuses active, want pending and running", active)
	}
}
