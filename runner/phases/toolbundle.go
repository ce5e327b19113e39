package phases

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// toolBundle runs the suite's tool-bundle checks. When the first one
// needs it, the bundle the assignment names is fetched into tmpfs (size and
// sha256 verified before anything reads it) and its helper, cure-measure,
// taken out; each check then runs in the helper, which unpacks the program
// it drives into a directory of its own and removes it when done. done
// removes the bundle and the helper. A failed fetch is tried again by the
// next check.
type toolBundle struct {
	e    *Executor
	ref  *curev1.ToolBundleRef
	emit agent.Emitter

	mu                   sync.Mutex
	dir, archive, helper string
}

func (t *toolBundle) measure(ctx context.Context, r measure.Request) ([]checks.Verdict, error) {
	if t.ref == nil {
		return nil, fmt.Errorf("%w: the suite runs %s from the tool bundle, and the coordinator sent none (start it with --tool-bundle)", checks.ErrToolMissing, r.Tool())
	}
	if err := t.fetch(ctx); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, t.helper, "-archive", t.archive, "-dir", t.dir)
	// A check cut short stops the helper and its fio or stress-ng (one
	// process group) with SIGTERM, so the helper still removes what it
	// unpacked; one that does not exit in time is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	return measure.Exec(cmd, r)
}

func (t *toolBundle) fetch(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.helper != "" {
		return nil
	}
	start := t.e.cfg.now()
	dir, err := os.MkdirTemp(t.e.cfg.TmpDir, "toolbundle-")
	if err != nil {
		return fmt.Errorf("tool bundle: %w", err)
	}
	helper := filepath.Join(dir, measure.Helper)
	archive, err := toolbundle.Fetch(ctx, artifact.Fetcher{Client: t.e.cfg.HTTP},
		toolbundle.Ref{URL: t.ref.GetUrl(), Want: artifact.Want{Size: t.ref.GetSize(), SHA256: t.ref.GetSha256()}}, dir)
	if err == nil {
		err = toolbundle.ExtractProgram(archive, measure.Helper, helper)
	}
	if err != nil {
		remove(helper, archive, dir)
		return err
	}
	t.dir, t.archive, t.helper = dir, archive, helper
	t.emit.Log("INFO", fmt.Sprintf("tool bundle %.12s fetched and verified (%d bytes) in %s", t.ref.GetSha256(), t.ref.GetSize(),
		t.e.cfg.now().Sub(start).Round(100*time.Millisecond)), nil)
	return nil
}

func (t *toolBundle) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir != "" {
		remove(t.helper, t.archive, t.dir)
	}
	t.dir, t.archive, t.helper = "", "", ""
}

// remove removes files and then their (empty) directory; a "" is skipped.
func remove(paths ...string) {
	for _, p := range paths {
		if p != "" {
			os.Remove(p)
		}
	}
}
