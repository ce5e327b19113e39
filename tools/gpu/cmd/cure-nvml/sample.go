//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/nvmlsource"
)

// runSample is -sample: NVML opened once, one telemetry line per interval.
func runSample(libPath string, interval time.Duration, count int, stdout, stderr io.Writer) int {
	if interval <= 0 || count < 0 {
		fmt.Fprintf(stderr, "cure-nvml: -sample needs a positive -interval and a -count of 0 or more\n")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	src, err := nvmlsource.Open(libPath)
	if err != nil {
		fmt.Fprintf(stderr, "cure-nvml: %v (the NVIDIA driver and libnvidia-ml.so.1 must be in the image)\n", err)
		return 3
	}
	defer src.Close()
	return sampleLoop(ctx, src, interval, count, time.Now, stdout, stderr)
}

// sampleLoop writes count lines (0: until ctx ends or stdout fails), the
// first at once.
func sampleLoop(ctx context.Context, lib gpu.Library, interval time.Duration, count int, now func() time.Time, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return 0
			case <-tick.C:
			}
		}
		line, err := gpu.ReadTelemetry(lib, now())
		if err != nil {
			fmt.Fprintf(stderr, "cure-nvml: %v\n", err)
			return 1
		}
		if err := enc.Encode(line); err != nil {
			return 0 // the reader went away: nothing left to do
		}
	}
	return 0
}
