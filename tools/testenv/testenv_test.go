package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatal and Skip instead of
// stopping the goroutine.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.failed = fmt.Sprintf(f, args...) }
func (r *recorder) Skipf(f string, args ...any)  { r.skipped = fmt.Sprintf(f, args...) }

func TestMissingFailsInCompleteRun(t *testing.T) {
	t.Setenv(CompleteEnv, "1")
	r := &recorder{TB: t}
	Missing(r, "a loop device")
	if !strings.Contains(r.failed, "needs a loop device") || r.skipped != "" {
		t.Errorf("complete run: failed %q skipped %q, want a failure naming the need", r.failed, r.skipped)
	}
}

func TestMissingSkipsInPartialRun(t *testing.T) {
	t.Setenv(CompleteEnv, "")
	r := &recorder{TB: t}
	Missing(r, "a loop device")
	if !strings.Contains(r.skipped, "needs a loop device") || r.failed != "" {
		t.Errorf("partial run: failed %q skipped %q, want a skip naming the need", r.failed, r.skipped)
	}
}

func TestRequireRootNamesWhat(t *testing.T) {
	t.Setenv(CompleteEnv, "1")
	r := &recorder{TB: t}
	RequireRoot(r, "losetup")
	if os.Geteuid() == 0 {
		if r.failed != "" || r.skipped != "" {
			t.Errorf("as root: failed %q skipped %q, want nothing", r.failed, r.skipped)
		}
		return
	}
	if !strings.Contains(r.failed, "root (losetup)") {
		t.Errorf("not root, complete run: failed %q, want it to name root (losetup)", r.failed)
	}
}
