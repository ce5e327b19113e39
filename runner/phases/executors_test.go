package phases

import (
	"slices"
	"testing"

	"github.com/cure-oss/cure/modes"
)

// TestEveryPhaseHasExecutor: every runner-owned phase of every mode's plan
// has an executor in this runner (the coordinator half is in
// provisioner-lite/pipeline).
func TestEveryPhaseHasExecutor(t *testing.T) {
	covered := 0
	for _, m := range modes.All() {
		plan, err := modes.For(m)
		if err != nil {
			t.Fatal(err)
		}
		if missing := plan.Unexecutable(modes.Runner, Has); len(missing) > 0 {
			t.Errorf("mode %s: runner phases without an executor: %v", m, missing)
		}
		for _, ph := range plan.Phases {
			if ph.Owner == modes.Runner {
				covered++
			}
		}
	}
	if covered == 0 {
		t.Fatal("no runner phase in any plan: the check checked nothing")
	}

	// A phase added to a plan without an executor is caught.
	t.Run("synthetic plan", func(t *testing.T) {
		plan := modes.Plan{Mode: "synthetic", Phases: []modes.Phase{
			{Name: modes.Preflight, Owner: modes.Coordinator},
			{Name: modes.NVMe, Owner: modes.Runner},
			{Name: "gpu_burn", Owner: modes.Runner},
		}}
		if got := plan.Unexecutable(modes.Runner, Has); !slices.Equal(got, []string{"gpu_burn"}) {
			t.Errorf("Unexecutable = %v, want [gpu_burn] (coordinator phases are the coordinator's to check)", got)
		}
	})

	t.Run("no stray executors", func(t *testing.T) {
		for name := range executors {
			found := false
			for _, m := range modes.All() {
				plan, _ := modes.For(m)
				if ph, ok := plan.Phase(name); ok && ph.Owner == modes.Runner {
					found = true
				}
			}
			if !found {
				t.Errorf("executor for %q, which no plan gives the runner", name)
			}
		}
	})
}
