package pipeline

import (
	"slices"
	"testing"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/modes/modestest"
)

func hasCoordExecutor(phase modes.PhaseName) bool {
	_, ok := coordExecutors[phase]
	return ok
}

// TestEveryPhaseHasExecutor: every coordinator-owned phase of every mode's
// plan has an executor here, and none is stray (the runner half is in
// runner/phases).
func TestEveryPhaseHasExecutor(t *testing.T) {
	var names []modes.PhaseName
	for name := range coordExecutors {
		names = append(names, name)
	}
	modestest.CheckExecutors(t, modes.Coordinator, hasCoordExecutor, names)

	// A phase added to a plan without an executor is caught.
	t.Run("synthetic plan", func(t *testing.T) {
		plan := modes.Plan{Mode: "synthetic", Phases: []modes.Phase{
			{Name: modes.Preflight, Owner: modes.Coordinator},
			{Name: "flash_the_moon", Owner: modes.Coordinator, Writes: true},
			{Name: "runner_only", Owner: modes.Runner},
		}}
		if got := plan.Unexecutable(modes.Coordinator, hasCoordExecutor); !slices.Equal(got, []modes.PhaseName{"flash_the_moon"}) {
			t.Errorf("Unexecutable = %v, want [flash_the_moon] (runner phases are the runner's to check)", got)
		}
	})
}
