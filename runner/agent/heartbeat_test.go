package agent

import (
	"testing"
	"time"
)

func TestHeartbeatPeriod(t *testing.T) {
	for ms, want := range map[int64]time.Duration{0: time.Minute, -5: time.Minute, 10: time.Second, 5000: 5 * time.Second, 3600000: time.Minute} {
		if got := HeartbeatPeriod(ms); got != want {
			t.Errorf("heartbeat_ms %d: %s, want %s", ms, got, want)
		}
	}
}
