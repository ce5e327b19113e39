package gpucheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/telemetry"
)

// Stream starts the helper and hands its stdout over as it is written;
// wait returns once it exited, with the end of its stderr. Cancelling ctx
// stops it.
type Stream func(ctx context.Context, name string, args ...string) (stdout io.Reader, wait func() (stderr []byte, err error), err error)

// Telemetry samples the node's GPUs for a stage (telemetry.GPUSource)
// through `cure-nvml -sample`, one process for the whole stage.
type Telemetry struct {
	// Helper is the cure-nvml path; default DefaultNVMLHelper.
	Helper string
	// Root holds sys/ ("/" on a node).
	Root string
	// Prepare brings the GPU driver up first; nil assumes it is up.
	Prepare func(context.Context) error
	// Stream runs the helper; nil means the real process.
	Stream Stream
	Log    *slog.Logger
}

// maxBadLines is how many unreadable lines the helper may print before
// the sampling gives up on it.
const maxBadLines = 10

// Sample implements telemetry.GPUSource. A node with no NVIDIA GPU on the
// bus has nothing to sample (nil at once); GPUs without the helper, a
// driver that did not come up or a helper that stopped are errors.
func (g Telemetry) Sample(ctx context.Context, every time.Duration, out func([]telemetry.GPUReading)) error {
	if g.Root == "" {
		g.Root = "/"
	}
	if g.Helper == "" {
		g.Helper = DefaultNVMLHelper
	}
	if g.Stream == nil {
		g.Stream = osStream
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	gpus, err := NVIDIAGPUs(g.Root)
	if err != nil {
		return fmt.Errorf("listing GPUs: %w", err)
	}
	if len(gpus) == 0 {
		return nil
	}
	if _, err := os.Stat(g.Helper); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cure-nvml not in this image (%s): %d NVIDIA GPU(s) on the bus are not sampled", g.Helper, len(gpus))
	}
	if g.Prepare != nil {
		if err := g.Prepare(ctx); err != nil {
			return fmt.Errorf("%d NVIDIA GPU(s) on the bus, but the driver did not come up: %w", len(gpus), err)
		}
	}
	args := []string{"-sample", "-interval", every.String()}
	g.Log.Info("gpu telemetry: running NVML helper", "helper", g.Helper, "args", args, "gpus", len(gpus))
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	stdout, wait, err := g.Stream(hctx, g.Helper, args...)
	if err != nil {
		return fmt.Errorf("starting %s: %w", g.Helper, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	bad := 0
	var lastErr error
	for sc.Scan() {
		rs, err := parseTelemetryLine(sc.Bytes())
		if err != nil {
			bad++
			lastErr = err
			if bad > maxBadLines {
				break
			}
			continue
		}
		out(rs)
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		bad, lastErr = maxBadLines+1, err
	}
	if bad > maxBadLines {
		stop() // the helper is of no use: end it, and drain what it still writes
		go io.Copy(io.Discard, stdout)
	}
	stderr, werr := wait()
	switch {
	case bad > maxBadLines:
		return fmt.Errorf("%s -sample printed unreadable output (%d lines), the last: %v", g.Helper, bad, lastErr)
	case ctx.Err() != nil:
		return nil // stopped with the stage
	case werr != nil:
		return fmt.Errorf("%s -sample stopped: %v; stderr: %s", g.Helper, werr, tail(stderr))
	}
	return fmt.Errorf("%s -sample ended before the stage did; stderr: %s", g.Helper, tail(stderr))
}

// parseTelemetryLine reads one line of `cure-nvml -sample` into readings;
// a value the helper left out is NaN.
func parseTelemetryLine(b []byte) ([]telemetry.GPUReading, error) {
	var line gpu.TelemetryLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&line); err != nil {
		return nil, fmt.Errorf("telemetry line %q: %w", tail(b), err)
	}
	if line.TimeUnixMs <= 0 || len(line.GPUs) > 1024 {
		return nil, fmt.Errorf("telemetry line %q: time %d, %d GPUs", tail(b), line.TimeUnixMs, len(line.GPUs))
	}
	t := time.UnixMilli(line.TimeUnixMs)
	out := make([]telemetry.GPUReading, 0, len(line.GPUs))
	for _, g := range line.GPUs {
		if g.Index < 0 || g.Index >= 1024 {
			return nil, fmt.Errorf("telemetry line %q: GPU index %d", tail(b), g.Index)
		}
		r := telemetry.GPUReading{Index: g.Index, Time: t, TempC: u32(g.TempC), SMMHz: u32(g.SMClockMHz), BaseMHz: u32(g.BaseClockMHz), PowerW: math.NaN()}
		if g.PowerW != nil {
			r.PowerW = *g.PowerW
		}
		if g.Reasons != nil {
			r.Reasons, r.ReasonsOK = *g.Reasons, true
		}
		out = append(out, r)
	}
	return out, nil
}

func u32(p *uint32) float64 {
	if p == nil {
		return math.NaN()
	}
	return float64(*p)
}

// osStream runs the helper with its stdout piped; on cancellation it sends
// SIGTERM (the helper shuts NVML down), then kills it 10 s later.
func osStream(ctx context.Context, name string, args ...string) (io.Reader, func() ([]byte, error), error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var e bytes.Buffer
	cmd.Stderr = &e
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return stdout, func() ([]byte, error) {
		err := cmd.Wait()
		b := e.Bytes()
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		return b, err
	}, nil
}
