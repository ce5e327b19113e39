package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
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
// kernel is its compare kernel (compare.ptx; -c), "" for gpu_burn's default
// (compare.ptx in the working directory). CUDA_DEVICE_ORDER=PCI_BUS_ID
// makes gpu-burn's GPU numbers NVML's indices.
func RunGPUBurn(ctx context.Context, run Exec, path, kernel string, d time.Duration) ([]Verdict, error) {
	secs := int(d / time.Second)
	if secs < 1 {
		return nil, fmt.Errorf("gpu-burn duration %s: must be at least 1s", d)
	}
	// gpu-burn stops itself after secs; a minute on top covers its start-up
	// and its SIGTERM/SIGKILL grace before we kill it.
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	// gpu_burn reads its options before the time, and scans every
	// argument for "-d", "-h", "-l" and "-tc": a kernel path holding one
	// would turn an option on, so it is refused.
	var args []string
	if kernel != "" {
		for _, o := range []string{"-d", "-h", "-l", "-tc"} {
			if strings.Contains(kernel, o) {
				return nil, fmt.Errorf("gpu-burn compare kernel %s: gpu_burn would read the %q in its path as an option", kernel, o)
			}
		}
		args = append(args, "-c", kernel)
	}
	args = append(args, strconv.Itoa(secs))
	out, err := run(ctx, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID"}, path, args...)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, fmt.Errorf("running %s %s: %w", path, strings.Join(args, " "), err)
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
	return runDCGM(ctx, run, path, strconv.Itoa(level), nil, timeout, targets, args...)
}

// DCGMLoadTests are the DCGM diagnostic tests that run as a timed GPU load
// (their test_duration parameter): targeted_stress holds each GPU at a
// target SGEMM rate, targeted_power at a target power, checking the GPU
// keeps up.
var DCGMLoadTests = []string{"targeted_stress", "targeted_power"}

// dcgmLoadMargin is what DCGM adds to a load test's duration: the host
// engine's and the plugin's start-up, the software checks before it.
const dcgmLoadMargin = 10 * time.Minute

// RunDCGMLoad runs DCGM test (a DCGMLoadTests name) as the GPU load for d:
// `dcgmi diag -r TEST -p TEST.test_duration=SECONDS -j`. A GPU the test
// skipped had no load: that is an ERROR, never a SKIP.
func RunDCGMLoad(ctx context.Context, run Exec, path, test string, d time.Duration, targets []DCGMTarget, args ...string) ([]Verdict, error) {
	if !slices.Contains(DCGMLoadTests, test) {
		return nil, fmt.Errorf("dcgm load %q: want one of %s", test, strings.Join(DCGMLoadTests, ", "))
	}
	secs := int(d / time.Second)
	if secs < 1 {
		return nil, fmt.Errorf("dcgm load duration %s: must be at least 1s", d)
	}
	vs, err := runDCGM(ctx, run, path, test, []string{fmt.Sprintf("%s.test_duration=%d", test, secs)}, d+dcgmLoadMargin, targets, args...)
	for i := range vs {
		if vs[i].Status == Skip && vs[i].Component != "gpu" {
			vs[i].Status = Error
			vs[i].Message = strings.TrimPrefix(vs[i].Message+"; the GPU load ("+test+") did not run on this GPU", "; ")
		}
	}
	return vs, err
}

// runDCGM runs `dcgmi diag ARGS -r RUN [-p PARAMS] -j` and judges it.
func runDCGM(ctx context.Context, run Exec, path, what string, params []string, timeout time.Duration, targets []DCGMTarget, args ...string) ([]Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append([]string{"diag"}, args...), "-r", what)
	if len(params) > 0 {
		argv = append(argv, "-p", strings.Join(params, ";"))
	}
	argv = append(argv, "-j")
	out, err := run(ctx, nil, path, argv...)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, fmt.Errorf("running %s diag -r %s: %w", path, what, err)
	}
	// dcgmi exits non-zero when a test fails; the document says which.
	d, perr := ParseDCGMDiag(out)
	if perr != nil {
		if err != nil {
			return []Verdict{{Component: "gpu", Check: CheckDCGMDiag, Status: Error,
				Message: fmt.Sprintf("%s diag -r %s: %v; output unreadable: %v; it printed: %s", path, what, err, perr, clip(out, 512))}}, nil
		}
		return nil, fmt.Errorf("%s diag -r %s: %w", path, what, perr)
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
