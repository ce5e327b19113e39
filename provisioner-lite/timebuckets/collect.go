package timebuckets

import (
	"context"
	"strings"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Collector keeps, of a run's events fed to it in ID order, what Compute
// and RebootTimes read: the coordinator's reboot, iPXE and runner-connected
// notes (a few per boot) and the latest valid report of each install stage. The
// rest (the runner's metrics and logs, most of a long run's timeline) is
// dropped as it comes, so what it holds grows with the run's boots, not
// with its history. Compute over Events() equals Compute over all events.
type Collector struct {
	events []store.Event
	stage  map[string]int // install stage → index of its latest report in events
}

// Add keeps e if Compute or RebootTimes reads it.
func (c *Collector) Add(e store.Event) {
	switch {
	case e.Source == runstate.SourceCoordinator && e.Kind == runstate.EventInfo && timelineNote(e.Message):
		e.Payload = nil // not read: not held
		c.events = append(c.events, e)
	case e.Kind == runstate.EventMetric && e.Phase == modes.OSInstall:
		stage, _, ok := stageReport(e.Message)
		if !ok {
			return
		}
		e.Payload = nil
		// installStages keeps the last valid report of each stage: the
		// earlier ones change nothing.
		if i, ok := c.stage[stage]; ok {
			c.events[i] = e
			return
		}
		if c.stage == nil {
			c.stage = map[string]int{}
		}
		c.stage[stage] = len(c.events)
		c.events = append(c.events, e)
	}
}

// Events is what was kept, in the order it came (an install stage's report
// where its first report came).
func (c *Collector) Events() []store.Event { return c.events }

// Len is how many events the collector holds.
func (c *Collector) Len() int { return len(c.events) }

func timelineNote(msg string) bool {
	for _, p := range []string{msgReboot, msgHostReboot, msgIPXE, msgHello} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// RunEvents reads what Compute and RebootTimes need of run runID's events
// from st, a page at a time.
func RunEvents(ctx context.Context, st *store.Store, runID string) ([]store.Event, error) {
	var c Collector
	err := st.ScanEvents(ctx, runID, 0, func(e store.Event) error {
		c.Add(e)
		return nil
	})
	return c.Events(), err
}
