// Package audit records who did what (operator calls) and what a hostile
// peer may have tried (refused calls, security events) in the store's audit
// log and the coordinator's log. Every field is bounded before it is stored
// (Clip). Refused calls and security events come from peers, so they are
// charged to budgets per peer and in total: a flood costs a counter, and the
// entries it would have written are summed in one summary entry (and one
// log line) per interval.
package audit

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
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
	AttestationFailed   = "attestation_failed"    // a boot's TPM attestation did not verify (names the PCR, expected and observed values)
	AttestationMissing  = "attestation_missing"   // a boot that must attest (SKU requires it, or its node has an enrolled EK) did not
	EKMismatch          = "ek_mismatch"           // a boot attested with another endorsement key than the node's
	EKUntrusted         = "ek_untrusted"          // an unpinned EK whose certificate does not chain to the site's EK roots (--ek-roots), or certifies another key
	FirmwareDrift       = "firmware_drift"        // firmware measurements changed without a firmware change by the pipeline
	PairAddress         = "pair_address"          // a runner offered a node-pair address that is not its node's own (refused; the node's check is its ERROR)
	EnlistRefused       = "enlist_refused"        // an unknown machine's enlistment boot or inspection report refused (source rate, cap, token)
	// Held sums the refused calls and security events that went over their
	// budget since the previous summary: how many, of which kinds, from
	// which peers (the busiest named).
	Held = "entries_held"
)

// Bounds of a stored entry. An allowed call comes from a certificate
// holder and its entry is the record of what it did, so it keeps more; a
// refused call or a security event is whatever a peer sent.
const (
	maxField        = 128 // actor, role, peer, action, run, result
	maxNodeID       = 128
	operatorNodes   = 1024
	operatorDetail  = 16 << 10
	refusedNodes    = 16
	refusedDetail   = 1 << 10
	heldPeers       = 1024 // distinct peers a summary counts by name
	heldActions     = 64
	summaryPeerList = 5
)

// Clip bounds every field of e: one line of at most 128 bytes each, at
// most maxNodes node ids (then one "… and K more"), detail cut to
// maxDetail bytes with the bytes dropped noted, and any URL's userinfo in
// it redacted. The store and every view of the audit log go through it.
func Clip(e store.AuditEntry, maxNodes, maxDetail int) store.AuditEntry {
	for _, f := range []*string{&e.Actor, &e.Role, &e.Peer, &e.Action, &e.RunID, &e.Result} {
		*f = textsafe.BoundedLine(*f, maxField)
	}
	if e.Nodes != nil {
		e.Nodes = textsafe.First(e.Nodes, maxNodes, maxNodeID)
	}
	e.Detail = textsafe.Bounded(textsafe.RedactURLs(e.Detail), maxDetail)
	return e
}

// Recorder writes audit entries. The zero value is not usable; use New.
type Recorder struct {
	st  *store.Store
	log *slog.Logger
	// every is the minimum spacing of stored security events per key, and
	// the refill time of one entry of a peer's security budget.
	every time.Duration
	// summaryEvery spaces the summaries of what the budgets held.
	summaryEvery time.Duration
	now          func() time.Time

	deniedPeers, securityPeers *peerlimit.Keyed
	denied, security           *peerlimit.Bucket
	refusals                   *peerlimit.Refusals

	mu   sync.Mutex
	seen map[string]*window
	held held
}

type window struct {
	last       time.Time
	suppressed int
}

// held is what the budgets kept out since the last summary.
type held struct {
	since      time.Time
	total      int
	byAction   map[string]int
	byPeer     map[string]int
	otherPeers int
}

// New returns a recorder storing into st (nil: log only) that keeps at most
// one security event per (event, source) every `every` (0: 10 s). Refused
// operator calls are kept at most 10 per peer, then one a minute, and 60 in
// total, then one every 5 s; security events 20 per peer, then one per
// `every`, and 100 in total, then one a second. What they hold back is
// summed in one entry every 6 × `every`.
func New(st *store.Store, log *slog.Logger, every time.Duration) *Recorder {
	if every <= 0 {
		every = 10 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{st: st, log: log, every: every, summaryEvery: 6 * every, now: time.Now, seen: map[string]*window{},
		deniedPeers:   peerlimit.NewKeyed(1.0/60, 10, 4096),
		securityPeers: peerlimit.NewKeyed(1/every.Seconds(), 20, 4096),
		denied:        peerlimit.NewBucket(0.2, 60),
		security:      peerlimit.NewBucket(1, 100),
		refusals:      peerlimit.NewRefusals(log, "audit", slog.LevelWarn, every),
	}
}

// Operator records an allowed operator call; every one is kept.
func (r *Recorder) Operator(ctx context.Context, e store.AuditEntry) {
	e.Kind = store.AuditOperator
	r.write(ctx, Clip(e, operatorNodes, operatorDetail))
}

// Denied records an operator call refused for want of a certificate, a
// role or a known method: kept within the peer's and the total budget,
// counted in the next summary beyond them.
func (r *Recorder) Denied(ctx context.Context, e store.AuditEntry) {
	e.Kind = store.AuditOperator
	e = Clip(e, refusedNodes, refusedDetail)
	if !r.admit(ctx, r.deniedPeers, r.denied, e.Peer, OperatorDenied, 1) {
		return
	}
	r.write(ctx, e)
}

// Security records a security event, unless the same event from the same
// source was recorded less than `every` ago (the next one kept says how
// many were suppressed in between) or the source's or the total budget is
// spent (the next summary counts it).
func (r *Recorder) Security(ctx context.Context, e store.AuditEntry) {
	e.Kind = store.AuditSecurity
	e = Clip(e, refusedNodes, refusedDetail)
	key := e.Action + "\x00" + e.Actor + "\x00" + e.Peer
	now := r.now()
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
	n := 1 + w.suppressed
	w.last, w.suppressed = now, 0
	r.mu.Unlock()
	if !r.admit(ctx, r.securityPeers, r.security, e.Peer, e.Action, n) {
		return
	}
	if n > 1 {
		e.Detail = textsafe.Truncate(e.Detail, refusedDetail-64) + " (" + strconv.Itoa(n-1) + " more like this suppressed)"
	}
	r.write(ctx, e)
}

func (r *Recorder) prune(now time.Time) {
	for k, w := range r.seen {
		if now.Sub(w.last) > r.every {
			delete(r.seen, k)
		}
	}
}

// admit charges one entry to the peer's and the total budget; an entry
// refused is counted (n events) for the summary and the log's summary.
func (r *Recorder) admit(ctx context.Context, peers *peerlimit.Keyed, total *peerlimit.Bucket, peer, action string, n int) bool {
	// The total is charged only for what the peer's own budget allows: one
	// peer past its budget does not spend the others' share.
	if peers.Allow(peer) && total.Allow() {
		return true
	}
	r.refusals.Note(action, peer)
	now := r.now()
	r.mu.Lock()
	h := &r.held
	if h.total == 0 {
		h.since = now
		h.byAction, h.byPeer = map[string]int{}, map[string]int{}
	}
	h.total += n
	if _, ok := h.byAction[action]; ok || len(h.byAction) < heldActions {
		h.byAction[action] += n
	} else {
		h.byAction["other"] += n
	}
	if _, ok := h.byPeer[peer]; ok || len(h.byPeer) < heldPeers {
		h.byPeer[peer] += n
	} else {
		h.otherPeers += n
	}
	due := now.Sub(h.since) >= r.summaryEvery
	r.mu.Unlock()
	if due {
		r.Flush(ctx)
	}
	return false
}

// Flush writes the summary of what the budgets held since the last one,
// if anything, and the log's summary of the same.
func (r *Recorder) Flush(ctx context.Context) {
	r.refusals.Flush()
	r.mu.Lock()
	h := r.held
	r.held = held{}
	r.mu.Unlock()
	if h.total == 0 {
		return
	}
	r.write(ctx, summaryEntry(h, r.now()))
}

// Run flushes the summary every interval until ctx ends. The last flush
// is its owner's, before the store closes.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(r.summaryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

func summaryEntry(h held, now time.Time) store.AuditEntry {
	actions := slices.Sorted(maps.Keys(h.byAction))
	parts := make([]string, len(actions))
	for i, a := range actions {
		parts[i] = a + "×" + strconv.Itoa(h.byAction[a])
	}
	peers := slices.SortedFunc(maps.Keys(h.byPeer), func(a, b string) int {
		if h.byPeer[a] != h.byPeer[b] {
			return h.byPeer[b] - h.byPeer[a]
		}
		return strings.Compare(a, b)
	})
	busiest := make([]string, 0, summaryPeerList)
	for _, p := range peers[:min(len(peers), summaryPeerList)] {
		busiest = append(busiest, p+"×"+strconv.Itoa(h.byPeer[p]))
	}
	npeers := strconv.Itoa(len(peers))
	if h.otherPeers > 0 {
		npeers = "more than " + npeers
	}
	e := store.AuditEntry{Kind: store.AuditSecurity, Action: Held, Result: "summary", Time: now,
		Detail: fmt.Sprintf("%d refused calls and security events over their per-peer or total budget were not stored one by one since %s: %s; from %s peer(s), busiest %s",
			h.total, h.since.UTC().Format(time.RFC3339), strings.Join(parts, ", "), npeers, strings.Join(busiest, ", "))}
	if len(peers) == 1 && h.otherPeers == 0 {
		e.Peer = peers[0]
	}
	return Clip(e, refusedNodes, refusedDetail)
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
