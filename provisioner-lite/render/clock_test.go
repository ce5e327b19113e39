package render

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// The boundaries where a seconds field alone rounds up: 59.95 s must carry
// into the minute (it printed 00:60.0), 59:59.95 into the hour.
func TestClock(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "00:00.0", 49: "00:00.0", 50: "00:00.1", 949: "00:00.9", 950: "00:01.0",
		59_949: "00:59.9", 59_950: "01:00.0", 59_999: "01:00.0", 60_000: "01:00.0",
		659_950: "11:00.0", 62_500: "01:02.5",
		3_599_949: "59:59.9", 3_599_950: "1:00:00.0", 3_723_400: "1:02:03.4",
		-1500: "-00:01.5", -59_950: "-01:00.0",
	} {
		if got := Clock(ms); got != want {
			t.Errorf("Clock(%d) = %q, want %q", ms, got, want)
		}
	}
	for ms, want := range map[int64]string{0: "+00:00.0", 62_500: "+01:02.5", 59_960: "+01:00.0", -1500: "-00:01.5"} {
		if got := offset(ms); got != want {
			t.Errorf("offset(%d) = %q, want %q", ms, got, want)
		}
	}
}

// FuzzClock: every field stays in range and the text reads back within
// half a tenth of the offset.
func FuzzClock(f *testing.F) {
	for _, ms := range []int64{0, 59_950, 59_949, 3_599_950, -59_950, math.MaxInt64, math.MinInt64} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, ms int64) {
		got := Clock(ms)
		text, neg := strings.CutPrefix(got, "-")
		if neg != (ms < 0) {
			t.Fatalf("Clock(%d) = %q: sign", ms, got)
		}
		var h, m, s, tenth uint64
		if strings.Count(text, ":") == 2 {
			if _, err := fmt.Sscanf(text, "%d:%02d:%02d.%1d", &h, &m, &s, &tenth); err != nil || h == 0 {
				t.Fatalf("Clock(%d) = %q: %v", ms, got, err)
			}
		} else if _, err := fmt.Sscanf(text, "%02d:%02d.%1d", &m, &s, &tenth); err != nil {
			t.Fatalf("Clock(%d) = %q: %v", ms, got, err)
		}
		if m > 59 || s > 59 || tenth > 9 {
			t.Fatalf("Clock(%d) = %q: a field out of range", ms, got)
		}
		abs := uint64(ms)
		if ms < 0 {
			abs = uint64(-(ms + 1)) + 1
		}
		back := ((h*60+m)*60+s)*1000 + tenth*100
		if back+50 < abs || back > abs+50 {
			t.Fatalf("Clock(%d) = %q reads back as %d ms", ms, got, back)
		}
	})
}
