package phases

import (
	"slices"
	"testing"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/modes/modestest"
)

// TestEveryPhaseHasExecutor: every runner-owned phase of every mode's plan
// has an executor in this runner, and none is stray (the coordinator half
// is in provisioner-lite/pipeline).
func TestEveryPhaseHasExecutor(t *testing.T) {
	var names []modes.PhaseName
	for name := range executors {
		names = append(names, name)
	}
	modestest.CheckExecutors(t, modes.Runner, Has, names)

	// A phase added to a plan without an executor is caught.
	t.Run("synthetic plan", func(t *testing.T) {
		plan := modes.Plan{Mode: "synthetic", Phases: []modes.Phase{
			{Name: modes.Preflight, Owner: modes.Coordinator},
			{Name: modes.NVMe, Owner: modes.Runner},
			{Name: "gpu_burn", Owner: modes.Runner},
		}}
		if got := plan.Unexecutable(modes.Runner, Has); !slices.Equal(got, []modes.PhaseName{"gpu_burn"}) {
			t.Errorf("Unexecutable = %v, want [gpu_burn] (coordinator phases are the coordinator's to check)", got)
		}
	})
}
