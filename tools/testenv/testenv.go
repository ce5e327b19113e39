// Package testenv decides what a test does when the machine lacks what it
// needs: in a complete run (CURE_TEST_COMPLETE=1, which `make test` sets)
// it fails, naming the need; in a developer's partial run it skips.
package testenv

import (
	"os"
	"testing"
)

// CompleteEnv is the variable `make test` sets to 1: the run is meant to
// prove everything, so a test that cannot run is a failure.
const CompleteEnv = "CURE_TEST_COMPLETE"

// Complete reports whether this is a complete run.
func Complete() bool { return os.Getenv(CompleteEnv) == "1" }

// RequireRoot fails (complete run) or skips (partial run) t unless the
// process runs as root; what says what the test does with root.
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Missing(t, "root ("+what+")")
}

// Missing fails (complete run) or skips (partial run) t for lacking need.
func Missing(t testing.TB, need string) {
	t.Helper()
	if Complete() {
		t.Fatalf("needs %s: %s=1 (make test) says this run is complete, so it cannot skip", need, CompleteEnv)
		return // Fatalf stops a real test; a recording TB returns here
	}
	t.Skipf("needs %s (a partial run: %s is not 1)", need, CompleteEnv)
}
