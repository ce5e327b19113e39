package store

import (
	"context"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// RunBootPath is the path of the run's latest boot into CURE
// (runstate.BootPath*): the status of the coordinator's last event that
// handed a boot its token; "" when the coordinator served none.
func (s *Store) RunBootPath(ctx context.Context, runID string) (string, error) {
	path := ""
	var after int64
	for {
		evs, err := s.Events(ctx, runID, after, 1000)
		if err != nil {
			return "", err
		}
		for _, ev := range evs {
			if ev.Kind == runstate.EventInfo && ev.Source == runstate.SourceCoordinator && strings.HasPrefix(ev.Status, runstate.BootPathStatusPrefix) {
				path = strings.TrimPrefix(ev.Status, runstate.BootPathStatusPrefix)
			}
			after = ev.ID
		}
		if len(evs) < 1000 {
			return path, nil
		}
	}
}
