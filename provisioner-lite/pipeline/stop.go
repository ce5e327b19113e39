package pipeline

import (
	"context"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// stopRequest is how a run stopped from outside its goroutine ends.
type stopRequest struct {
	status curev1.RunStatus
	msg    string
}

// requestStop ends a run from outside its goroutine: a running pipeline is
// cancelled and the run is finished after the goroutine exits (so none of its
// late saves lands on top); a run no goroutine drives is finished at once.
// It reports whether the run was driven by this engine.
func (c *core) requestStop(runID string, req stopRequest) bool {
	c.mu.Lock()
	cancel, running := c.running[runID]
	if running {
		c.stops[runID] = req
	}
	c.mu.Unlock()
	if running {
		cancel() // the run's goroutine ends and its launcher calls stopRun
		return true
	}
	c.stopRun(runID, req)
	return false
}

func (c *core) stopRun(runID string, req stopRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.cfg.Store.GetRun(ctx, runID)
	if err != nil || !runstate.Active(r.Status) {
		return
	}
	c.finish(ctx, &r, req.status, req.msg)
}

// Cancel ends an active run as canceled: its pipeline stops, its runner's
// session is cut and its tokens are deleted. The node is left as it is (a
// cancelled wipe or flash may have left it half done: the run's timeline
// says how far it got).
func (e *Engine) Cancel(ctx context.Context, runID, reason string) error {
	msg := "canceled by operator"
	if reason != "" {
		msg += ": " + reason
	}
	e.cfg.Hub.CloseRun(runID)
	e.requestStop(runID, stopRequest{status: curev1.RunStatus_RUN_CANCELED, msg: msg})
	return nil
}
