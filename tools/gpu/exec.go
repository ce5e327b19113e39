package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Exec runs a program and returns its standard output; the seam between
// the gpu-burn/dcgmi wrappers and the machine. env is added to the
// environment. A non-zero exit comes back as *exec.ExitError with the
// output still returned.
type Exec func(ctx context.Context, env []string, name string, args ...string) ([]byte, error)

// OSExec is the real Exec.
func OSExec(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	return cmd.Output()
}

// RunGPUBurn runs gpu-burn (at path) for d and returns its per-GPU verdicts.
// It runs in the caller's goroutine, so Collect can use it as the Load.
// CUDA_DEVICE_ORDER=PCI_BUS_ID makes gpu-burn's GPU numbers NVML's indices.
func RunGPUBurn(ctx context.Context, run Exec, path string, d time.Duration) ([]Verdict, error) {
	secs := int(d / time.Second)
	if secs < 1 {
		return nil, fmt.Errorf("gpu-burn duration %s: must be at least 1s", d)
	}
	// gpu-burn stops itself after secs; a minute on top covers its start-up
	// and its SIGTERM/SIGKILL grace before we kill it.
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	out, err := run(ctx, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID"}, path, strconv.Itoa(secs))
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, fmt.Errorf("running %s %d: %w", path, secs, err)
	}
	b, perr := ParseGPUBurn(bytesReader(out))
	if perr != nil {
		return nil, fmt.Errorf("%s: %w", path, perr)
	}
	vs := b.Verdicts()
	if err != nil && b.Completed {
		// gpu-burn exits 0 even with FAULTY GPUs; a non-zero exit after a
		// complete summary is unusual enough to say so.
		vs = append(vs, Verdict{Component: "gpu", Check: CheckGPUBurn, Status: Error, Message: fmt.Sprintf("%s exited with %v after its summary", path, err)})
	}
	return vs, nil
}

// RunDCGMDiag runs `dcgmi diag -r level -j` (with args before the level,
// such as the host engine's address) and returns the verdicts for targets.
// dcgmi needs a running nv-hostengine (DCGM.RunDiag starts one); a
// connection failure comes back as a single ERROR verdict on "gpu".
func RunDCGMDiag(ctx context.Context, run Exec, path string, level int, timeout time.Duration, targets []DCGMTarget, args ...string) ([]Verdict, error) {
	if level < 1 || level > 4 {
		return nil, fmt.Errorf("dcgmi diag level %d: must be 1-4", level)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append([]string{"diag"}, args...), "-r", strconv.Itoa(level), "-j")
	out, err := run(ctx, nil, path, argv...)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, fmt.Errorf("running %s diag -r %d: %w", path, level, err)
	}
	// dcgmi exits non-zero when a test fails; the document says which.
	d, perr := ParseDCGMDiag(out)
	if perr != nil {
		if err != nil {
			return []Verdict{{Component: "gpu", Check: CheckDCGMDiag, Status: Error,
				Message: fmt.Sprintf("%s diag -r %d: %v; output unreadable: %v; it printed: %s", path, level, err, perr, clip(out, 512))}}, nil
		}
		return nil, fmt.Errorf("%s diag -r %d: %w", path, level, perr)
	}
	return d.Verdicts(targets), nil
}

// clip is b's last n bytes as valid UTF-8, for messages.
func clip(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
