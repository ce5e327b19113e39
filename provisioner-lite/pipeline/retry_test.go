package pipeline

import (
	"testing"
	"time"
)

func TestRetryDelayJitteredWithinCap(t *testing.T) {
	base, max := 2*time.Second, time.Minute
	for attempt := 1; attempt <= 10; attempt++ {
		ceiling := min(base<<(attempt-1), max)
		distinct := map[time.Duration]bool{}
		for range 200 {
			d := retryDelay(base, max, attempt)
			if d < 0 || d > ceiling {
				t.Fatalf("attempt %d: delay %v outside [0, %v]", attempt, d, ceiling)
			}
			distinct[d] = true
		}
		// Full jitter: nodes that failed together do not retry together.
		if len(distinct) < 150 {
			t.Errorf("attempt %d: only %d distinct delays of 200", attempt, len(distinct))
		}
	}
	if d := retryDelay(0, time.Minute, 3); d != 0 {
		t.Errorf("zero base: %v", d)
	}
}
