// Package bmcpool keeps one Redfish session per BMC across the pipeline's
// steps, bounds the calls and logins in flight, and paces power-ons per
// power group. Its Connector opens a node's BMC with the TLS policy its
// inventory entry gives.
package bmcpool

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pacing"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Pool keeps one Redfish session and HTTP transport per BMC across the
// pipeline's steps (a run used to log in four times, and BMCs cap their
// sessions), limits the calls in flight per BMC and the logins in flight
// overall (a fleet start must not open thousands of TLS handshakes at once),
// and paces power-ons per PDU or rack.
type Pool struct {
	conn        *Connector
	idle        time.Duration
	linger      time.Duration // how long a released session's connection stays open for the next step
	maxInflight int
	logins      chan struct{}
	pacer       *pacing.Pacer
	groupKeys   []string
	log         *slog.Logger
	// dial is redfish.Connect; tests count it.
	dial func(ctx context.Context, ep redfish.Endpoint, o redfish.Options) (*redfish.Client, error)
	// OnRetry hears of BMC requests the transport retried (metrics).
	OnRetry func(status int)

	mu      sync.Mutex
	entries map[string]*entry
	logged  atomic.Int64 // sessions opened
}

type entry struct {
	key      string
	client   *redfish.Client
	err      error
	ready    chan struct{} // closed once the login finished
	sem      chan struct{}
	refs     int
	lastUsed time.Time
	closer   *time.Timer // closes the idle connection once the linger has passed unused
}

// connLinger is how long the last step's connection to a BMC stays open:
// a run's steps often follow one another within milliseconds (inventory,
// submit, trace, follow; boot override, power on), and each new connection
// is a full key exchange (about a fifth of the coordinator's CPU in a
// 1,000-node bench-fleet profile, the connection closed at every release);
// a step minutes later still finds it closed.
const connLinger = 2 * time.Second

// New pools conn's sessions: idle is how long an unused session stays
// logged in, maxInflight the calls in flight per BMC, maxLogins the logins
// in flight over all BMCs; pacer (nil: none) paces power-ons per group, the
// first of groupKeys a node carries as a label naming its group.
func New(conn *Connector, idle time.Duration, maxInflight, maxLogins int, pacer *pacing.Pacer, groupKeys []string, log *slog.Logger) *Pool {
	return &Pool{conn: conn, idle: idle, linger: connLinger, maxInflight: max(maxInflight, 1), logins: make(chan struct{}, max(maxLogins, 1)),
		pacer: pacer, groupKeys: groupKeys, log: log, dial: redfish.Connect, entries: map[string]*entry{}}
}

// entryKey identifies a BMC and everything its session depends on: a new
// password, pin or CA makes a new session.
func entryKey(ep redfish.Endpoint, n store.Node) string {
	h := sha256.New()
	io.WriteString(h, ep.Password)
	return fmt.Sprintf("%s|%s|%s|%s|%t|%x", ep.URL, ep.Username, ep.Fingerprint, n.BMCCAFile, ep.Insecure, h.Sum(nil)[:8])
}

// Connect is pipeline.Config.ConnectBMC: a handle on the BMC's pooled
// session, which Close gives back.
func (p *Pool) Connect(ctx context.Context, n store.Node) (pipeline.BMC, error) {
	ep, err := p.conn.Endpoint(n)
	if err != nil {
		return nil, err
	}
	key := entryKey(ep, n)
	p.mu.Lock()
	e := p.entries[key]
	creator := e == nil
	if creator {
		e = &entry{key: key, ready: make(chan struct{}), sem: make(chan struct{}, p.maxInflight)}
		p.entries[key] = e
	}
	e.refs++
	p.mu.Unlock()
	if creator {
		e.client, e.err = p.login(ctx, ep, n)
		close(e.ready)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		p.release(e)
		return nil, ctx.Err()
	}
	if e.err != nil {
		p.mu.Lock()
		if p.entries[key] == e {
			delete(p.entries, key) // the next step tries a fresh login
		}
		p.mu.Unlock()
		p.release(e)
		return nil, e.err
	}
	return &handle{Client: e.client, e: e, p: p, group: pacing.Group(n.Labels, p.groupKeys)}, nil
}

func (p *Pool) login(ctx context.Context, ep redfish.Endpoint, n store.Node) (*redfish.Client, error) {
	select {
	case p.logins <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.logins }()
	// The boot mode policy and the UefiHttp URI (--boot-mode, --https-listen)
	// go to pooled clients as to direct ones.
	c, err := p.dial(ctx, ep, redfish.Options{Timeout: p.conn.timeout, Logger: p.log.With("node", n.ID), OnRetry: p.OnRetry,
		BootMode: p.conn.BootMode, HTTPBootURI: p.conn.HTTPBootURI})
	if err == nil {
		p.logged.Add(1)
	}
	return c, err
}

// release gives a step's use back. The last user's release closes the
// session's idle connection once it has lingered unused (connLinger): the
// next step of a run often comes at once, but also minutes later (a
// reboot, a validation), and the session token outlives a TCP connection,
// so only a handshake is paid again.
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	e.refs--
	e.lastUsed = time.Now()
	last := e.refs == 0
	p.mu.Unlock()
	if !last {
		return
	}
	select {
	case <-e.ready: // e.client is set
	default:
		return
	}
	if e.client == nil {
		return
	}
	if p.linger <= 0 {
		e.client.CloseIdleConnections()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.closer == nil {
		e.closer = time.AfterFunc(p.linger, func() { p.closeIfUnused(e) })
	} else {
		e.closer.Reset(p.linger)
	}
}

// closeIfUnused closes e's idle connection unless a step holds it again
// (that step's release arms the linger anew).
func (p *Pool) closeIfUnused(e *entry) {
	p.mu.Lock()
	unused := e.refs == 0
	p.mu.Unlock()
	if unused {
		e.client.CloseIdleConnections()
	}
}

// evictIdle logs out of the sessions nobody used for the idle time.
func (p *Pool) evictIdle(ctx context.Context, now time.Time) int {
	p.mu.Lock()
	var victims []*entry
	for k, e := range p.entries {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.refs == 0 && now.Sub(e.lastUsed) >= p.idle {
			victims = append(victims, e)
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
	for _, e := range victims {
		p.mu.Lock()
		if e.closer != nil {
			e.closer.Stop()
		}
		p.mu.Unlock()
		if e.client != nil {
			_ = e.client.Close(ctx)
		}
	}
	return len(victims)
}

// Run evicts idle sessions until ctx ends, then logs out of all of them.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(max(p.idle/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.evictIdle(cctx, time.Now().Add(100*365*24*time.Hour))
			cancel()
			return
		case now := <-t.C:
			p.evictIdle(ctx, now)
		}
	}
}

// handle is one pipeline step's use of a pooled session: Close gives it
// back instead of logging out; calls wait for a slot of their BMC; power-ons
// wait for their group's pacing.
type handle struct {
	*redfish.Client
	e      *entry
	p      *Pool
	group  string
	closed atomic.Bool
}

func (h *handle) acquire(ctx context.Context) error {
	select {
	case h.e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *handle) done() { <-h.e.sem }

func (h *handle) pace(ctx context.Context) error {
	d, err := h.p.pacer.Wait(ctx, h.group)
	if d > 0 {
		h.p.log.Debug("power-on paced", "group", h.group, "waited", d)
	}
	return err
}

// Close returns the session to the pool.
func (h *handle) Close(context.Context) error {
	if h.closed.CompareAndSwap(false, true) {
		h.p.release(h.e)
	}
	return nil
}

func (h *handle) PowerState(ctx context.Context) (string, error) {
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer h.done()
	return h.Client.PowerState(ctx)
}

func (h *handle) PowerOn(ctx context.Context) error {
	if err := h.pace(ctx); err != nil {
		return err
	}
	if err := h.acquire(ctx); err != nil {
		return err
	}
	defer h.done()
	return h.Client.PowerOn(ctx)
}

func (h *handle) PowerOff(ctx context.Context, force bool) error {
	if err := h.acquire(ctx); err != nil {
		return err
	}
	defer h.done()
	return h.Client.PowerOff(ctx, force)
}

// Reset paces the resets that power a node on from off.
func (h *handle) Reset(ctx context.Context, resetType string) error {
	switch resetType {
	case "On", "ForceOn", "PowerCycle":
		if err := h.pace(ctx); err != nil {
			return err
		}
	}
	if err := h.acquire(ctx); err != nil {
		return err
	}
	defer h.done()
	return h.Client.Reset(ctx, resetType)
}

func (h *handle) SetBootOverride(ctx context.Context, target redfish.BootTarget, once bool) error {
	if err := h.acquire(ctx); err != nil {
		return err
	}
	defer h.done()
	return h.Client.SetBootOverride(ctx, target, once)
}

func (h *handle) FirmwareInventory(ctx context.Context) ([]redfish.FirmwareItem, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.FirmwareInventory(ctx)
}

func (h *handle) BiosAttributes(ctx context.Context) (map[string]any, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.BiosAttributes(ctx)
}

func (h *handle) SetBiosAttributes(ctx context.Context, attrs map[string]any) error {
	if err := h.acquire(ctx); err != nil {
		return err
	}
	defer h.done()
	return h.Client.SetBiosAttributes(ctx, attrs)
}

// The health reads take a slot of their BMC like every other call: a
// validate phase polls the sensors while other steps may use the session.

func (h *handle) Sensors(ctx context.Context) (*redfish.Sensors, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.Sensors(ctx)
}

func (h *handle) PowerSupplies(ctx context.Context) ([]redfish.Part, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.PowerSupplies(ctx)
}

func (h *handle) Fans(ctx context.Context) ([]redfish.Part, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.Fans(ctx)
}

func (h *handle) EventLog(ctx context.Context, since, until time.Time, max int) (*redfish.EventLog, error) {
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.done()
	return h.Client.EventLog(ctx, since, until, max)
}

var _ pipeline.BMCHealth = (*handle)(nil)
