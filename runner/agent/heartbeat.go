package agent

import "time"

// Heartbeat periods of a running phase: the coordinator asks for one inside
// its liveness budget (Assignment.heartbeat_ms); at least every minute, at
// most every second. The fleet simulator's runners beat the same way.
const (
	MaxHeartbeat = time.Minute
	MinHeartbeat = time.Second
)

// HeartbeatPeriod is the period for the coordinator's heartbeat_ms, bounded.
func HeartbeatPeriod(ms int64) time.Duration {
	if ms <= 0 {
		return MaxHeartbeat
	}
	return min(max(time.Duration(ms)*time.Millisecond, MinHeartbeat), MaxHeartbeat)
}
