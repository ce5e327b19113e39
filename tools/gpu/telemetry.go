package gpu

import (
	"errors"
	"fmt"
	"time"
)

// TelemetryLine is every GPU read at one instant for a stage's telemetry:
// one JSON line of `cure-nvml -sample`.
type TelemetryLine struct {
	TimeUnixMs int64              `json:"timeUnixMs"`
	GPUs       []TelemetryReading `json:"gpus"`
}

// TelemetryReading is one GPU's reading; a field NVML did not answer is
// absent and Errors says why.
type TelemetryReading struct {
	Index int     `json:"index"` // NVML index
	BusID string  `json:"busId,omitempty"`
	TempC *uint32 `json:"tempC,omitempty"`
	// SMClockMHz is the SM clock now; BaseClockMHz what it is compared
	// with (Device.BaseSMClockMHz).
	SMClockMHz   *uint32  `json:"smClockMHz,omitempty"`
	BaseClockMHz *uint32  `json:"baseClockMHz,omitempty"`
	PowerW       *float64 `json:"powerW,omitempty"`
	// Reasons are the clocks-event reasons set (Reason* bits).
	Reasons *uint64  `json:"reasons,omitempty"`
	Errors  []string `json:"errors,omitempty"`
}

// ReadTelemetry reads every GPU once: temperature, SM clock and its base,
// power draw and clocks-event reasons. A query a device cannot answer
// leaves its field out and is named in the reading's Errors; only a
// library that cannot count its devices is an error.
func ReadTelemetry(lib Library, now time.Time) (TelemetryLine, error) {
	line := TelemetryLine{TimeUnixMs: now.UnixMilli(), GPUs: []TelemetryReading{}}
	n, err := lib.DeviceCount()
	if err != nil {
		return line, fmt.Errorf("GPU telemetry: %w", err)
	}
	for i := range n {
		r := TelemetryReading{Index: i}
		d, err := lib.DeviceByIndex(i)
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			line.GPUs = append(line.GPUs, r)
			continue
		}
		note := func(what string, err error) bool {
			if err == nil {
				return true
			}
			if !errors.Is(err, ErrNotSupported) {
				r.Errors = append(r.Errors, what+": "+err.Error())
			}
			return false
		}
		if p, err := d.PCI(); note("bus id", err) {
			r.BusID = NormalizeBusID(p.BusID)
		}
		if v, err := d.Temperature(); note("temperature", err) {
			r.TempC = &v
		}
		if v, err := d.SMClockMHz(); note("SM clock", err) {
			r.SMClockMHz = &v
		}
		if v, err := d.BaseSMClockMHz(); note("base SM clock", err) {
			r.BaseClockMHz = &v
		}
		if v, err := d.PowerUsage(); note("power", err) {
			w := float64(v) / 1000
			r.PowerW = &w
		}
		if v, err := d.ClocksEventReasons(); note("clocks event reasons", err) {
			r.Reasons = &v
		}
		line.GPUs = append(line.GPUs, r)
	}
	return line, nil
}
