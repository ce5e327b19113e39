package netboot

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MACInventory is the inventory's MACs held in memory, so that checking a
// request costs a map lookup however many arrive. It is read again from
// its source in the background, never on a request's path: after a miss
// that passed its budget when older than MinAge (a node just imported is
// answered from its next retry), and after a hit when older than MaxAge (a
// node removed stops being answered). It holds exactly the inventory's
// MACs, so a flood of other MACs cannot grow it.
type MACInventory struct {
	ctx    context.Context // ends the background reads (the coordinator's life)
	load   func(ctx context.Context) (map[string]string, error)
	log    *slog.Logger
	minAge time.Duration
	maxAge time.Duration
	now    func() time.Time

	mu      sync.RWMutex
	macs    map[string]string // MAC (lowercase, colon-separated) -> node
	readAt  time.Time         // when the last read began, successful or not
	failed  bool              // the last read failed (logged once per failing spell)
	loading atomic.Bool
	loads   atomic.Uint64
}

// Ages of the inventory copy (see MACInventory).
const (
	DefaultInventoryMinAge = 2 * time.Second
	DefaultInventoryMaxAge = 30 * time.Second
	inventoryLoadTimeout   = 10 * time.Second
)

// NewMACInventory reads the inventory once (an error here is an error at
// start). load returns every inventory MAC with its node; ctx bounds every
// later read too.
func NewMACInventory(ctx context.Context, load func(ctx context.Context) (map[string]string, error), log *slog.Logger) (*MACInventory, error) {
	if log == nil {
		log = slog.Default()
	}
	inv := &MACInventory{ctx: ctx, load: load, log: log, minAge: DefaultInventoryMinAge, maxAge: DefaultInventoryMaxAge, now: time.Now}
	inv.readAt = inv.now()
	m, err := load(ctx)
	if err != nil {
		return nil, fmt.Errorf("inventory MACs: %w", err)
	}
	inv.macs = normalizeMACs(m)
	inv.loads.Add(1)
	return inv, nil
}

func normalizeMACs(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for mac, node := range m {
		out[strings.ToLower(mac)] = node
	}
	return out
}

// Lookup names the node of mac, from memory.
func (i *MACInventory) Lookup(mac string) (string, bool) {
	i.mu.RLock()
	node, ok := i.macs[mac]
	age := i.now().Sub(i.readAt)
	i.mu.RUnlock()
	if ok && age >= i.maxAge {
		i.refresh()
	}
	return node, ok
}

// Missed reads the inventory again if the copy is older than MinAge.
func (i *MACInventory) Missed() {
	i.mu.RLock()
	age := i.now().Sub(i.readAt)
	i.mu.RUnlock()
	if age >= i.minAge {
		i.refresh()
	}
}

// Len is the number of MACs held.
func (i *MACInventory) Len() int {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return len(i.macs)
}

// Loads is how many times the inventory was read.
func (i *MACInventory) Loads() uint64 { return i.loads.Load() }

// refresh reads the inventory in the background, one read at a time;
// a failed read keeps the previous copy.
func (i *MACInventory) refresh() {
	if i.ctx.Err() != nil || !i.loading.CompareAndSwap(false, true) {
		return
	}
	i.mu.Lock()
	i.readAt = i.now()
	i.mu.Unlock()
	go func() {
		defer i.loading.Store(false)
		ctx, cancel := context.WithTimeout(i.ctx, inventoryLoadTimeout)
		m, err := i.load(ctx)
		cancel()
		i.loads.Add(1)
		i.mu.Lock()
		wasFailed := i.failed
		i.failed = err != nil
		if err == nil {
			i.macs = normalizeMACs(m)
		}
		i.mu.Unlock()
		switch {
		case i.ctx.Err() != nil: // shutting down
		case err != nil && !wasFailed:
			i.log.Warn("proxy DHCP: reading the inventory's MACs failed: answering from the previous copy", "err", err)
		case err == nil && wasFailed:
			i.log.Info("proxy DHCP: inventory MACs read again")
		}
	}()
}
