package modestest

import (
	"strings"
	"testing"

	"github.com/cure-oss/cure/modes"
)

// recorder is a testing.TB that keeps what a check reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Fatalf(format string, args ...any) { r.errs = append(r.errs, format) }

// The check fails on a missing executor and on a stray one, and passes a
// table that covers the plans exactly.
func TestCheckExecutors(t *testing.T) {
	var all []modes.PhaseName
	for _, m := range modes.All() {
		plan, _ := modes.For(m)
		for _, ph := range plan.Phases {
			if ph.Owner == modes.Runner {
				all = append(all, ph.Name)
			}
		}
	}
	set := map[modes.PhaseName]bool{}
	for _, n := range all {
		set[n] = true
	}
	has := func(p modes.PhaseName) bool { return set[p] }

	r := &recorder{TB: t}
	CheckExecutors(r, modes.Runner, has, all)
	if len(r.errs) != 0 {
		t.Errorf("an exact table failed: %v", r.errs)
	}
	r = &recorder{TB: t}
	CheckExecutors(r, modes.Runner, func(p modes.PhaseName) bool { return p != modes.Validate && set[p] }, all)
	if len(r.errs) == 0 || !strings.Contains(strings.Join(r.errs, "|"), "without an executor") {
		t.Errorf("a missing validate executor passed: %v", r.errs)
	}
	r = &recorder{TB: t}
	CheckExecutors(r, modes.Runner, has, append(all, "flash_the_moon"))
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "which no plan gives") {
		t.Errorf("a stray executor: %v", r.errs)
	}
}
