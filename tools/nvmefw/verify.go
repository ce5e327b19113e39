package nvmefw

import (
	"context"
	"fmt"
	"time"

	"github.com/cure-oss/cure/tools/nvme"
)

// Observed is the controller's firmware state as read back.
type Observed struct {
	FR  string            // Identify Controller FR: the running revision
	Log *nvme.FirmwareLog // Firmware Slot Information log
}

// Read issues Identify Controller and Get Log Page (firmware slot).
func Read(a nvme.Admin) (*nvme.Controller, *nvme.FirmwareLog, error) {
	c, err := nvme.IdentifyController(a)
	if err != nil {
		return nil, nil, err
	}
	log, err := nvme.GetFirmwareLog(a)
	if err != nil {
		return nil, nil, err
	}
	return c, log, nil
}

// Verify checks that target is running: Identify FR equals it and the log's
// active slot reports it (and is slot, unless slot is 0). After a reset the
// kernel re-initialises the controller asynchronously, so commands failing
// meanwhile are retried every poll until ctx ends.
func Verify(ctx context.Context, a nvme.Admin, target string, slot int, poll time.Duration) (*Observed, error) {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	var last error
	for {
		o, err := verifyOnce(a, target, slot)
		if err == nil {
			return o, nil
		}
		last = err
		if _, mismatch := err.(*mismatchError); mismatch {
			// The controller answers and runs something else: waiting
			// will not change that.
			return o, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nvme firmware verify: controller did not answer before %v: %w", ctx.Err(), last)
		case <-time.After(poll):
		}
	}
}

type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }

func verifyOnce(a nvme.Admin, target string, slot int) (*Observed, error) {
	c, log, err := Read(a)
	if err != nil {
		return nil, err
	}
	o := &Observed{FR: c.FR, Log: log}
	if c.FR != target {
		return o, &mismatchError{fmt.Sprintf("nvme firmware verify: running revision (Identify FR) is %q, expected %q (active slot %d, next %d, slots %q)", c.FR, target, log.ActiveSlot, log.NextSlot, log.Slots)}
	}
	if slot != 0 && log.ActiveSlot != slot {
		return o, &mismatchError{fmt.Sprintf("nvme firmware verify: FR is %q but the log's active slot is %d, expected %d", c.FR, log.ActiveSlot, slot)}
	}
	if got := log.Active(); got != target {
		return o, &mismatchError{fmt.Sprintf("nvme firmware verify: FR is %q but active slot %d reports %q", c.FR, log.ActiveSlot, got)}
	}
	return o, nil
}
