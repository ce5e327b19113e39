// Package modestest checks a side's phase executors against every mode's
// plan. The coordinator's and the runner's tests both use it: neither may
// import the other, and both import modes.
package modestest

import (
	"testing"

	"github.com/cure-oss/cure/modes"
)

// CheckExecutors fails t when a phase some plan gives owner has no executor
// (has reports false), and when an executor in names runs a phase no plan
// gives owner (a typo or dead code).
func CheckExecutors(t testing.TB, owner modes.Owner, has func(phase modes.PhaseName) bool, names []modes.PhaseName) {
	t.Helper()
	covered := 0
	for _, m := range modes.All() {
		plan, err := modes.For(m)
		if err != nil {
			t.Fatal(err)
		}
		if missing := plan.Unexecutable(owner, has); len(missing) > 0 {
			t.Errorf("mode %s: %s phases without an executor: %v", m, owner, missing)
		}
		for _, ph := range plan.Phases {
			if ph.Owner == owner {
				covered++
			}
		}
	}
	if covered == 0 {
		t.Fatalf("no %s phase in any plan: the check checked nothing", owner)
	}
	for _, name := range names {
		found := false
		for _, m := range modes.All() {
			plan, _ := modes.For(m)
			if ph, ok := plan.Phase(name); ok && ph.Owner == owner {
				found = true
			}
		}
		if !found {
			t.Errorf("executor for %q, which no plan gives the %s", name, owner)
		}
	}
}
