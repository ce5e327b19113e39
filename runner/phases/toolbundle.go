package phases

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// toolBundle runs the suite's tool-bundle programs: the bundle the
// assignment names is fetched (size and sha256 verified) and unpacked into
// tmpfs when the first check needs it, with only the files of the tools
// the suite runs; done removes it. A failed fetch is tried again by the
// next check that needs a tool.
type toolBundle struct {
	e    *Executor
	ref  *curev1.ToolBundleRef
	need []string
	emit agent.Emitter

	mu  sync.Mutex
	dir string
	b   *toolbundle.Bundle
}

func (t *toolBundle) command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	if t.ref == nil {
		return nil, fmt.Errorf("the suite runs %s from the tool bundle, and the coordinator sent none (start it with --tool-bundle)", name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.b == nil {
		if err := t.fetch(ctx); err != nil {
			return nil, err
		}
	}
	return t.b.Command(ctx, name, args...)
}

func (t *toolBundle) fetch(ctx context.Context) error {
	start := t.e.cfg.now()
	dir, err := os.MkdirTemp(t.e.cfg.TmpDir, "toolbundle-")
	if err != nil {
		return fmt.Errorf("tool bundle: %w", err)
	}
	b, err := toolbundle.Fetch(ctx, artifact.Fetcher{Client: t.e.cfg.HTTP}, toolbundle.Ref{URL: t.ref.GetUrl(),
		Want: artifact.Want{Size: t.ref.GetSize(), SHA256: t.ref.GetSha256()}}, dir, "tools", t.need)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	t.dir, t.b = dir, b
	t.emit.Log("INFO", fmt.Sprintf("tool bundle %.12s fetched, verified and unpacked (%s) in %s", t.ref.GetSha256(), b.Unpacked,
		t.e.cfg.now().Sub(start).Round(100*time.Millisecond)), map[string]string{"bytes": fmt.Sprint(t.ref.GetSize())})
	return nil
}

func (t *toolBundle) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
	t.dir, t.b = "", nil
}

var _ checks.Tools = (&toolBundle{}).command
