package gpucheck

import (
	"math"
	"testing"
)

// FuzzTelemetryLine: whatever the helper prints, a line parses or is
// refused without a panic, and what parses is within bounds.
func FuzzTelemetryLine(f *testing.F) {
	f.Add([]byte(`{"timeUnixMs":1795600000000,"gpus":[{"index":0,"tempC":61,"smClockMHz":1980,"baseClockMHz":1980,"powerW":650.5,"reasons":4}]}`))
	f.Add([]byte(`{"timeUnixMs":1,"gpus":[{"index":-1}]}`))
	f.Add([]byte(`{"timeUnixMs":1,"gpus":[{"index":3,"powerW":1e400}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := parseTelemetryLine(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Index < 0 || r.Index >= 1024 || r.Time.UnixMilli() <= 0 {
				t.Fatalf("reading out of bounds: %+v", r)
			}
			if !math.IsNaN(r.TempC) && (r.TempC < 0 || r.TempC > math.MaxUint32) {
				t.Fatalf("temperature %v", r.TempC)
			}
		}
	})
}
