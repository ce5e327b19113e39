package bootgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// A node whose inventory names the wrong MAC PXE-boots as a stranger: the
// proxy DHCP does not answer it, or its iPXE gets "not in the inventory",
// and its run waits for CURE until the budget ends. The coordinator cannot
// know which stranger is which node, but a request from an unknown MAC
// while a node it just powered on waits for CURE is worth showing on that
// node's timeline.

// Bounds of what unknown MACs may add to timelines: a site booting a
// whole rack at once cannot say which stranger is which node, and spoofed
// MACs must not fill the store.
const (
	maxAnnotatedWaits = 8 // with more nodes waiting for CURE, unknown MACs are only logged
	maxMACsPerWait    = 4 // distinct unknown MACs shown per wait
	// A wait that starts shows the unknown MACs seen in the moment before
	// it: a node that PXE-boots fast can ask before a loaded coordinator
	// has registered the wait its power-on began, and iPXE asks only once.
	maxRecentUnknown = 32
	recentUnknownFor = 2 * time.Minute
)

// seenMAC is one unknown MAC's latest network boot request.
type seenMAC struct {
	mac, via, from string
	at             time.Time
}

// cureWaits are the runs waiting for their runner to register, and the
// unknown MACs already shown on each.
type cureWaits struct {
	mu     sync.Mutex
	waits  map[string]*cureWait // run id
	recent []seenMAC            // oldest first, one per MAC
}

type cureWait struct {
	run   store.Run
	shown []string
	more  bool // a MAC beyond maxMACsPerWait was not shown (said once)
}

// add registers r's wait and returns the unknown MACs seen shortly before
// it to show on it now (under the lock note takes: each is shown once).
func (w *cureWaits) add(r store.Run, now time.Time) []seenMAC {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits == nil {
		w.waits = map[string]*cureWait{}
	}
	cw := &cureWait{run: r}
	w.waits[r.ID] = cw
	if len(w.waits) > maxAnnotatedWaits {
		return nil
	}
	var show []seenMAC
	for i := len(w.recent) - 1; i >= 0 && len(cw.shown) < maxMACsPerWait; i-- {
		if s := w.recent[i]; now.Sub(s.at) <= recentUnknownFor {
			cw.shown = append(cw.shown, s.mac)
			show = append(show, s)
		}
	}
	return show
}

// remember records s as its MAC's latest request; the caller holds mu.
func (w *cureWaits) remember(s seenMAC) {
	w.recent = slices.DeleteFunc(w.recent, func(o seenMAC) bool { return o.mac == s.mac })
	if len(w.recent) >= maxRecentUnknown {
		w.recent = slices.Delete(w.recent, 0, len(w.recent)-maxRecentUnknown+1)
	}
	w.recent = append(w.recent, s)
}

func (w *cureWaits) remove(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waits, runID)
}

// note picks the waits that should show mac: none when more than
// maxAnnotatedWaits runs wait, else each that has not shown it yet (and
// has room). The messages are the caller's to write.
func (w *cureWaits) note(s seenMAC) (show []store.Run, full []store.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.remember(s)
	mac := s.mac
	if len(w.waits) == 0 || len(w.waits) > maxAnnotatedWaits {
		return nil, nil
	}
	for _, cw := range w.waits {
		switch {
		case slices.Contains(cw.shown, mac):
		case len(cw.shown) < maxMACsPerWait:
			cw.shown = append(cw.shown, mac)
			show = append(show, cw.run)
		case !cw.more:
			cw.more = true
			full = append(full, cw.run)
		}
	}
	return show, full
}

// UnknownMAC is told of a network boot request from a MAC that is not in
// the node inventory: via names the listener ("proxy DHCP", "iPXE"), source
// the requester's address when known. Each run waiting for CURE (a few at
// most) gets one timeline entry per such MAC: if the MAC is that node's,
// its inventory entry is wrong. The listener logs the request itself.
func (g *Gate) UnknownMAC(ctx context.Context, mac, via, source string) {
	// The listener judged from its copy of the inventory, which may predate
	// an import that just added the MAC (a fixed typo): the warning is
	// judged from the inventory as it is now, or it would blame the fix.
	if _, err := g.cfg.Store.NodeByMAC(ctx, mac); !unknownMACErr(err) {
		return
	}
	s := seenMAC{mac: mac, via: via, at: time.Now()}
	if source != "" {
		s.from = " from " + source
	}
	show, full := g.waits.note(s)
	for _, r := range show {
		g.showUnknown(ctx, r, s)
	}
	for _, r := range full {
		g.cfg.Event(ctx, r, modes.WaitForCURE, runstate.EventLog, "WARN",
			fmt.Sprintf("more network boot requests from MACs not in the node inventory (%d shown)", maxMACsPerWait), 0)
	}
}

// showUnknown writes s on r's timeline.
func (g *Gate) showUnknown(ctx context.Context, r store.Run, s seenMAC) {
	macs := "none"
	if n, err := g.cfg.Store.GetNode(ctx, r.NodeID); err == nil && len(n.MACs) > 0 {
		macs = strings.Join(n.MACs, ", ")
	}
	g.cfg.Event(ctx, r, modes.WaitForCURE, runstate.EventLog, "WARN", fmt.Sprintf(
		"%s request from %s%s, a MAC not in the node inventory, while this node waits for CURE: if it is this node, "+
			"its inventory MACs (%s) are wrong; fix them with curectl nodes add or nodes import (the run keeps waiting)", s.via, s.mac, s.from, macs), 0)
}

// showRecentUnknown shows on r's timeline the unknown MACs that asked
// shortly before its wait began, each judged from the inventory as it is
// now.
func (g *Gate) showRecentUnknown(r store.Run, recent []seenMAC) {
	if len(recent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range recent {
		if _, err := g.cfg.Store.NodeByMAC(ctx, s.mac); unknownMACErr(err) {
			g.showUnknown(ctx, r, s)
		}
	}
}

// unknownMACErr says whether a NodeByMAC error means the MAC is not in
// the inventory.
func unknownMACErr(err error) bool { return errors.Is(err, store.ErrNotFound) }
