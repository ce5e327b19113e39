package pipeline

import (
	"slices"
	"testing"

	"github.com/cure-oss/cure/modes"
)

func hasCoordExecutor(phase string) bool {
	_, ok := coordExecutors[phase]
	return ok
}

// TestEveryPhaseHasExecutor: every coordinator-owned phase of every mode's
// plan has an executor here (the runner half is in runner/phases).
func TestEveryPhaseHasExecutor(t *testing.T) {
	covered := 0
	for _, m := range modes.All() {
		plan, err := modes.For(m)
		if err != nil {
			t.Fatal(err)
		}
		if missing := plan.Unexecutable(modes.Coordinator, hasCoordExecutor); len(missing) > 0 {
			t.Errorf("mode %s: coordinator phases without an executor: %v", m, missing)
		}
		for _, ph := range plan.Phases {
			if ph.Owner == modes.Coordinator {
				covered++
			}
		}
	}
	if covered == 0 {
		t.Fatal("no coordinator phase in any plan: the check checked nothing")
	}

	// A phase added to a plan without an executor is caught.
	t.Run("synthetic plan", func(t *testing.T) {
		plan := modes.Plan{Mode: "synthetic", Phases: []modes.Phase{
			{Name: modes.Preflight, Owner: modes.Coordinator},
			{Name: "flash_the_moon", Owner: modes.Coordinator, Writes: true},
			{Name: "runner_only", Owner: modes.Runner},
		}}
		if got := plan.Unexecutable(modes.Coordinator, hasCoordExecutor); !slices.Equal(got, []string{"flash_the_moon"}) {
			t.Errorf("Unexecutable = %v, want [flash_the_moon] (runner phases are the runner's to check)", got)
		}
	})

	// Nothing in the table that no plan uses: an executor for a phase name
	// modes does not plan is a typo or dead code.
	t.Run("no stray executors", func(t *testing.T) {
		for name := range coordExecutors {
			found := false
			for _, m := range modes.All() {
				plan, _ := modes.For(m)
				if ph, ok := plan.Phase(name); ok && ph.Owner == modes.Coordinator {
					found = true
				}
			}
			if !found {
				t.Errorf("executor for %q, which no plan gives the coordinator", name)
			}
		}
	})
}
