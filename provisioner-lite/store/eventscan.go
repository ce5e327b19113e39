package store

import (
	"context"
	"fmt"
)

// DefaultEventPage is how many events ScanEvents reads at once.
const DefaultEventPage = 1000

// ScanEvents hands run runID's events to fn in ID order, read from the
// store page events at a time (page <= 0: DefaultEventPage), so that a
// reader that keeps only what it needs holds one page, not the run's whole
// history (a soak's runner metrics and logs reach the run's event cap,
// 500,000). An error from fn stops the scan and is returned.
func (s *Store) ScanEvents(ctx context.Context, runID string, page int, fn func(Event) error) error {
	if page <= 0 {
		page = DefaultEventPage
	}
	for after := int64(0); ; {
		evs, err := s.Events(ctx, runID, after, page)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return fmt.Errorf("store: events of run %s: %w", runID, err)
			}
		}
		if len(evs) < page {
			return nil
		}
		after = evs[len(evs)-1].ID
	}
}
