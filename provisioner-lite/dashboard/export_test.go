package dashboard

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// WithTicks makes the live streams take their snapshots on the ticks sent
// by the test instead of on a ticker.
func WithTicks(cfg Config, ticks <-chan time.Time) Config {
	cfg.ticks = ticks
	return cfg
}

// BenchStreams are the states of live streams, for the benchmark.
type BenchStreams []*streamState

func NewBenchStreams(n int, f Filter, nodes string) BenchStreams {
	b := make(BenchStreams, n)
	for i := range b {
		b[i] = newStreamState(f, nodes)
	}
	return b
}

// Tick does one tick of every stream against the store as it is: one
// snapshot for all of them (shared), or one per stream. It returns the
// bytes of the messages the streams would send.
func (b BenchStreams) Tick(ctx context.Context, st *store.Store, shared bool) (int, error) {
	var snap *snapshot
	sent := 0
	for _, s := range b {
		if snap == nil || !shared {
			if snap = takeSnapshot(ctx, st); snap.err != nil {
				return 0, snap.err
			}
		}
		if d := s.next(snap); d != nil {
			m, _ := json.Marshal(d)
			sent += len(m)
		}
	}
	return sent, nil
}
