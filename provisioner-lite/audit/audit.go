// Package audit records who did what (operator calls) and what a hostile
// peer may have tried (security events) in the store's audit log and the
// coordinator's log. Security events come from peers, so they are
// rate-limited per (event, source): a flood costs a counter, not a row each.
package audit

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Security event names (store.AuditEntry.Action).
const (
	BootTokenRejected   = "boot_token_rejected"   // unknown, expired or superseded token at Hello
	BootTokenPeer       = "boot_token_peer"       // token presented from another address than it was issued to
	BootWindowContested = "boot_window_contested" // two boots claimed one boot window: the run stops
	RunnerIdentity      = "runner_identity"       // Hello's MAC/serial do not match the token's node
	RunnerSession       = "runner_session"        // malformed Hello or session protocol violation
	EventOtherRun       = "event_other_run"       // a runner sent an event naming another run
	RunEventCap         = "run_event_cap"         // a runner exceeded its run's hard event caps
	BootTokenRateLimit  = "boot_token_rate_limit" // too many iPXE token requests for a node
	HostCallback        = "host_callback_refused" // a host-ready callback was refused
	OperatorDenied      = "operator_denied"       // an API call without the certificate or role it needs
)

// Recorder writes audit entries. The zero value is not usable; use New.
type Recorder struct {
	st  *store.Store
	log *slog.Logger
	// Every is the minimum spacing of stored security events per key.
	every time.Duration

	mu   sync.Mutex
	seen map[string]*window
}

type window struct {
	last       time.Time
	suppressed int
}

// New returns a recorder storing into st (nil: log only) that keeps at most
// one security event per (event, source) every `every` (0: 10 s).
func New(st *store.Store, log *slog.Logger, every time.Duration) *Recorder {
	if every <= 0 {
		every = 10 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{st: st, log: log, every: every, seen: map[string]*window{}}
}

// Operator records an operator call; every one is kept.
func (r *Recorder) Operator(ctx context.Context, e store.AuditEntry) {
	e.Kind = store.AuditOperator
	r.write(ctx, e)
}

// Security records a security event, unless the same event from the same
// source was recorded less than `every` ago; the next one kept says how many
// were suppressed in between.
func (r *Recorder) Security(ctx context.Context, e store.AuditEntry) {
	e.Kind = store.AuditSecurity
	key := e.Action + "\x00" + e.Actor + "\x00" + e.Peer
	now := time.Now()
	r.mu.Lock()
	w := r.seen[key]
	if w == nil {
		if len(r.seen) > 100_000 { // a flood of distinct sources: forget the old ones
			r.prune(now)
		}
		w = &window{}
		r.seen[key] = w
	}
	if !w.last.IsZero() && now.Sub(w.last) < r.every {
		w.suppressed++
		r.mu.Unlock()
		return
	}
	if w.suppressed > 0 {
		e.Detail += " (" + strconv.Itoa(w.suppressed) + " more like this suppressed)"
	}
	w.last, w.suppressed = now, 0
	r.mu.Unlock()
	r.write(ctx, e)
}

func (r *Recorder) prune(now time.Time) {
	for k, w := range r.seen {
		if now.Sub(w.last) > r.every {
			delete(r.seen, k)
		}
	}
}

func (r *Recorder) write(ctx context.Context, e store.AuditEntry) {
	level := slog.LevelInfo
	if e.Kind == store.AuditSecurity {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "audit", "kind", e.Kind, "action", e.Action, "actor", e.Actor, "role", e.Role, "peer", e.Peer,
		"nodes", e.Nodes, "run", e.RunID, "result", e.Result, "detail", e.Detail)
	if r.st == nil {
		return
	}
	// The entry must land even when the caller's request was cancelled.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.st.AppendAudit(wctx, e); err != nil {
		r.log.Error("audit log write failed", "err", err)
	}
}
