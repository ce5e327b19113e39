package gpu

import (
	"strings"
	"testing"
	"time"
)

// The fake's clocks: a GPU at or past its slowdown temperature runs its SM
// clock down from the 1980 MHz default.
func (d *fakeDev) SMClockMHz() (uint32, error) {
	if d.temp >= d.slowdown {
		return 1500, d.chk()
	}
	return 1980, d.chk()
}
func (d *fakeDev) BaseSMClockMHz() (uint32, error) { return 1980, d.chk() }

func TestReadTelemetry(t *testing.T) {
	lib := newFakeLib(3)
	lib.devs[1].temp, lib.devs[1].reasons = 90, ReasonSWPowerCap|ReasonHWThermalSlowdown
	lib.devs[2].lost = true
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	line, err := ReadTelemetry(lib, now)
	if err != nil {
		t.Fatal(err)
	}
	if line.TimeUnixMs != now.UnixMilli() || len(line.GPUs) != 3 {
		t.Fatalf("line %+v", line)
	}
	g0, g1, g2 := line.GPUs[0], line.GPUs[1], line.GPUs[2]
	if *g0.TempC != 71 || *g0.SMClockMHz != 1980 || *g0.BaseClockMHz != 1980 || *g0.PowerW != 690 || *g0.Reasons != ReasonSWPowerCap || g0.Errors != nil {
		t.Errorf("gpu 0: %+v", g0)
	}
	if g0.BusID != NormalizeBusID("00000000:18:00.0") {
		t.Errorf("gpu 0 bus %q", g0.BusID)
	}
	if *g1.TempC != 90 || *g1.SMClockMHz != 1500 || *g1.Reasons&ReasonHWThermalSlowdown == 0 {
		t.Errorf("gpu 1: %+v", g1)
	}
	// A lost GPU answers nothing: every field absent, the error said.
	if g2.TempC != nil || g2.SMClockMHz != nil || g2.PowerW != nil || !strings.Contains(strings.Join(g2.Errors, "; "), ErrGPULost.Error()) {
		t.Errorf("gpu 2: %+v", g2)
	}
	for i, g := range line.GPUs {
		if g.Index != i {
			t.Errorf("reading %d has index %d", i, g.Index)
		}
	}
}
