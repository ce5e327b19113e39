package checks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/cure-oss/cure/tools/tail"
)

// Tools prepares an external program a check drives (fio, stress-ng,
// iperf3). The runner's comes from the verified tool bundle and fails when
// the run has none; tests run the host's (HostTools).
type Tools func(ctx context.Context, name string, args ...string) (*exec.Cmd, error)

// ErrToolMissing is wrapped by a Tools that does not have the program: the
// check it drives tested nothing (an ERROR unless the suite marks the check
// optional).
var ErrToolMissing = errors.New("tool missing")

// HostTools runs programs found on PATH.
func HostTools(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s not on PATH: %w", ErrToolMissing, name, err)
	}
	return exec.CommandContext(ctx, p, args...), nil
}

// MaxToolOutput bounds what RunTool keeps of stdout (the head) and of
// stderr (the tail).
const MaxToolOutput = 4 << 20

// RunTool runs cmd and returns its stdout (at most MaxToolOutput bytes; a
// longer output is cut, which its parser then refuses) and the end of its
// stderr. A failed run's error names the program, its exit status and the
// last lines of stderr.
func RunTool(cmd *exec.Cmd) (stdout, stderr []byte, err error) {
	out := &headBuffer{max: MaxToolOutput}
	errb := &tail.Buffer{Max: MaxToolOutput}
	cmd.Stdout, cmd.Stderr = out, errb
	err = cmd.Run()
	stderr = []byte(errb.String())
	if err != nil {
		last := strings.TrimSpace(string(stderr))
		if i := strings.LastIndex(last[:max(0, len(last)-400)], "\n"); i >= 0 {
			last = last[i+1:]
		}
		err = fmt.Errorf("%s: %w: %s", cmd.Args[0], err, strings.ReplaceAll(last, "\n", " | "))
	}
	return out.b.Bytes(), stderr, err
}

type headBuffer struct {
	max int
	b   bytes.Buffer
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.b.Len(); room > 0 {
		h.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
