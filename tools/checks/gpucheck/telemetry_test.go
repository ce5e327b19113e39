package gpucheck

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/telemetry"
)

// fakeStream plays the helper: it writes lines, then either ends (exit) or
// waits for the stage to stop it.
type fakeStream struct {
	lines  []string
	exit   error // the helper's own end, when it does not wait for ctx
	stderr string
	mu     sync.Mutex
	args   []string
}

func (f *fakeStream) run(ctx context.Context, name string, args ...string) (io.Reader, func() ([]byte, error), error) {
	f.mu.Lock()
	f.args = append([]string{name}, args...)
	f.mu.Unlock()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		for _, l := range f.lines {
			if _, err := io.WriteString(w, l+"\n"); err != nil {
				break
			}
		}
		if f.exit == nil {
			<-ctx.Done()
			w.Close()
			done <- errors.New("signal: terminated")
			return
		}
		w.Close()
		done <- f.exit
	}()
	return r, func() ([]byte, error) { return []byte(f.stderr), <-done }, nil
}

func helperFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "cure-nvml")
	if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTelemetrySample(t *testing.T) {
	root := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}, "0000:2a:00.0": {"0x10de", "0x030200"}})
	f := &fakeStream{lines: []string{
		`{"timeUnixMs":1795600000000,"gpus":[{"index":0,"busId":"0000:18:00.0","tempC":61,"smClockMHz":1980,"baseClockMHz":1980,"powerW":650.5,"reasons":4},` +
			`{"index":1,"busId":"0000:2a:00.0","tempC":64,"errors":["SM clock: lost"]}]}`,
		`not json`,
		`{"timeUnixMs":1795600010000,"gpus":[{"index":0,"tempC":70,"smClockMHz":1400,"baseClockMHz":1980,"powerW":700,"reasons":72}]}`,
	}}
	prepared := false
	g := Telemetry{Helper: helperFile(t), Root: root, Stream: f.run, Log: quiet(), Prepare: func(context.Context) error { prepared = true; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	var got [][]telemetry.GPUReading
	errc := make(chan error, 1)
	go func() {
		errc <- g.Sample(ctx, 5*time.Second, func(rs []telemetry.GPUReading) {
			got = append(got, rs)
			if len(got) == 2 {
				cancel() // the stage ends
			}
		})
	}()
	if err := <-errc; err != nil {
		t.Fatalf("a stage that stops the helper is no error: %v", err)
	}
	if !prepared || strings.Join(f.args[1:], " ") != "-sample -interval 5s" {
		t.Errorf("prepared %v, args %q", prepared, f.args)
	}
	if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 {
		t.Fatalf("readings %+v", got)
	}
	a, b, c := got[0][0], got[0][1], got[1][0]
	if a.Index != 0 || a.TempC != 61 || a.SMMHz != 1980 || a.BaseMHz != 1980 || a.PowerW != 650.5 || !a.ReasonsOK || a.Reasons != 4 ||
		a.Time.UnixMilli() != 1795600000000 {
		t.Errorf("gpu 0: %+v", a)
	}
	if b.Index != 1 || b.TempC != 64 || !math.IsNaN(b.SMMHz) || !math.IsNaN(b.PowerW) || b.ReasonsOK {
		t.Errorf("gpu 1 (values left out are NaN): %+v", b)
	}
	if c.SMMHz != 1400 || c.Reasons != 72 {
		t.Errorf("second line: %+v", c)
	}
}

func TestTelemetryProblems(t *testing.T) {
	gpus := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}})
	noGPU := gpuNode(t, map[string][2]string{"0000:00:02.0": {"0x1af4", "0x030000"}})
	ctx := context.Background()
	none := func([]telemetry.GPUReading) {}
	// No NVIDIA GPU: nothing to sample, no error, no helper run.
	f := &fakeStream{}
	if err := (Telemetry{Root: noGPU, Helper: "/nonexistent", Stream: f.run, Log: quiet()}).Sample(ctx, time.Second, none); err != nil || f.args != nil {
		t.Errorf("no GPU: %v, ran %q", err, f.args)
	}
	for _, tc := range []struct {
		name string
		g    Telemetry
		want string
	}{
		{"no helper", Telemetry{Helper: "/nonexistent/cure-nvml"}, "cure-nvml not in this image (/nonexistent/cure-nvml): 1 NVIDIA GPU(s) on the bus are not sampled"},
		{"driver down", Telemetry{Prepare: func(context.Context) error { return errors.New("nvidia.ko: unknown symbol") }},
			"the driver did not come up: nvidia.ko: unknown symbol"},
		{"helper exits", Telemetry{Stream: (&fakeStream{exit: errors.New("exit status 3"), stderr: "nvmlInit: driver not loaded"}).run},
			"-sample stopped: exit status 3; stderr: nvmlInit: driver not loaded"},
		{"helper prints garbage", Telemetry{Stream: (&fakeStream{lines: strings.Split(strings.Repeat("garbage\n", 12), "\n")}).run},
			"unreadable output"},
	} {
		g := tc.g
		g.Root, g.Log = gpus, quiet()
		if g.Helper == "" {
			g.Helper = helperFile(t)
		}
		if g.Stream == nil {
			g.Stream = (&fakeStream{}).run
		}
		err := g.Sample(ctx, time.Second, none)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
