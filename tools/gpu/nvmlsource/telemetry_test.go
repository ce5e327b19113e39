//go:build cgo

package nvmlsource

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/cure-oss/cure/tools/gpu"
)

// TestReadTelemetry reads a DGX H200 mock's GPUs once: the SM clock, its
// base from the default applications clock (or the max clock where the
// board has no default), power and the clocks-event reasons.
func TestReadTelemetry(t *testing.T) {
	s := dgxh200.New()
	for i, d := range s.Devices {
		sd := d.(*server.Device)
		h := &health{reasons: nvml.ClocksEventReasonSwPowerCap}
		if i == 4 {
			h.reasons |= nvml.ClocksThrottleReasonHwThermalSlowdown
		}
		instrument(sd, h)
		sd.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if i == 4 {
				return 1410, nvml.SUCCESS
			}
			return 1980, nvml.SUCCESS
		}
		sd.GetDefaultApplicationsClockFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if i == 7 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return 1980, nvml.SUCCESS
		}
		sd.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) { return 1985, nvml.SUCCESS }
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	line, err := gpu.ReadTelemetry(New(s), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(line.GPUs) != 8 || line.TimeUnixMs != now.UnixMilli() {
		t.Fatalf("line: %+v", line)
	}
	for i, g := range line.GPUs {
		if len(g.Errors) > 0 || g.TempC == nil || *g.TempC != 68 || g.PowerW == nil || *g.PowerW != 650 || g.BusID == "" {
			t.Errorf("gpu %d: %+v", i, g)
			continue
		}
		wantClock, wantBase, wantReasons := uint32(1980), uint32(1980), uint64(nvml.ClocksEventReasonSwPowerCap)
		switch i {
		case 4:
			wantClock, wantReasons = 1410, wantReasons|nvml.ClocksThrottleReasonHwThermalSlowdown
		case 7:
			wantBase = 1985
		}
		if *g.SMClockMHz != wantClock || *g.BaseClockMHz != wantBase || *g.Reasons != wantReasons {
			t.Errorf("gpu %d: clock %d base %d reasons %#x; want %d %d %#x", i, *g.SMClockMHz, *g.BaseClockMHz, *g.Reasons, wantClock, wantBase, wantReasons)
		}
	}
}
