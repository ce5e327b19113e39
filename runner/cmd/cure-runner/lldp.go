package main

import (
	"context"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/lldp"
)

// lldpListen is the boot's LLDP listen, started once the links are up and
// running beside the module loading, the TLS dial and the inventory.
type lldpListen struct {
	// full: the boot waits for the whole window (cure.lldp= set), else
	// it takes what was heard by the time the inventory is done.
	full   bool
	window time.Duration
	stop   context.CancelFunc
	done   chan lldp.Result
}

// startLLDP starts listening for LLDP on every port with carrier.
// cure.lldp=DURATION (the coordinator sets 35s for a node its cabling map
// names) makes the Hello wait up to that window, ending early once every
// port heard a switch; cure.lldp=0 turns listening off. Without it the
// listen costs the boot nothing: it reports what arrived while the boot
// did its other work (a switch sends every 30 s, so often nothing).
func (r *runner) startLLDP(ctx context.Context) *lldpListen {
	l := &lldpListen{window: lldp.MaxWindow, done: make(chan lldp.Result, 1)}
	if v, ok := r.cmd.Params["cure.lldp"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			r.log.Warn("kernel command line: cure.lldp: want a duration such as 35s; listening only while the boot works", "value", v)
		} else {
			l.full, l.window = true, min(d, lldp.MaxWindow)
		}
	}
	if r.opt.dryRun {
		l.window = 0 // no sockets on the developer's machine
	}
	lctx, stop := context.WithCancel(ctx)
	l.stop = stop
	root := r.opt.root
	go func() {
		l.done <- lldp.Listen(lctx, lldp.Options{
			Window: l.window,
			Ports:  func() ([]string, error) { return lldp.LinkedPorts(root) },
			Open:   lldp.OpenPacket,
			Log:    r.log,
		})
	}()
	return l
}

// finish ends the listen (at once, unless the boot waits for the window)
// and puts what each port heard on inv.
func (l *lldpListen) finish(r *runner, inv *curev1.Inventory) {
	if !l.full {
		l.stop()
	}
	res := <-l.done
	l.stop()
	if len(res.Listened) == 0 {
		return
	}
	res.Apply(inv, uint32(res.Waited.Milliseconds()))
	r.say("lldp listened=%d heard=%d waited=%s", len(res.Listened), len(res.Neighbours), res.Waited.Round(time.Millisecond))
}
