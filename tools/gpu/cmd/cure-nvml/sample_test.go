//go:build cgo

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/nvmlsource"
)

func TestSampleNoNVMLIsExit3(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"-sample", "-count", "1", "-lib", filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}, &out, &errb)
	if code != 3 || out.Len() != 0 || !strings.Contains(errb.String(), "ERROR_LIBRARY_NOT_FOUND") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if code := run([]string{"-sample", "-interval", "0s"}, &out, &errb); code != 2 {
		t.Errorf("-interval 0: exit %d", code)
	}
}

// TestSampleLines: -sample prints one JSON line per interval from a DGX
// H100 mock, -count of them.
func TestSampleLines(t *testing.T) {
	s := dgxh100.New()
	var temp uint32 = 60
	for _, d := range s.Devices {
		sd := d.(*server.Device)
		sd.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
		sd.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return temp, nvml.SUCCESS }
		sd.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
		sd.GetDefaultApplicationsClockFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
		sd.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		sd.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	var out, errb bytes.Buffer
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	n := 0
	now := func() time.Time { n++; temp += 5; return t0.Add(time.Duration(n) * time.Second) }
	if code := sampleLoop(context.Background(), nvmlsource.New(s), time.Millisecond, 3, now, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	sc := bufio.NewScanner(&out)
	var lines []gpu.TelemetryLine
	for sc.Scan() {
		var l gpu.TelemetryLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	for i, l := range lines {
		if l.TimeUnixMs != t0.Add(time.Duration(i+1)*time.Second).UnixMilli() || len(l.GPUs) != 8 {
			t.Fatalf("line %d: %+v", i, l)
		}
		g := l.GPUs[2]
		// An unsupported query is left out without an error.
		if *g.TempC != uint32(65+5*i) || *g.PowerW != 700 || *g.SMClockMHz != 1980 || g.Reasons != nil || len(g.Errors) != 0 {
			t.Errorf("line %d gpu 2: %+v", i, g)
		}
	}
}
