// Package bootgate decides what the coordinator hands to a node that boots
// from the network or calls back from its installed OS, and when
// (docs/SECURITY.md): a CURE boot only inside its run's boot window, with a
// per-boot token bound to the window and the requesting address, within a
// token budget; a second claimant of a window stops the run; the installed
// OS's callback only with a host token, once, while the run waits for it.
// It also shows network boots of MACs not in the inventory on the timelines
// of the runs waiting for CURE.
package bootgate

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// OpenWindow marks that the coordinator has just armed a one-time PXE
// boot into CURE: only now may the boot server mint tokens for the run, and
// the first boot to register closes the window again. The window's id is
// its opening time (windowOpened), which the claim settles from.
func OpenWindow(r *store.Run) {
	r.Pipeline.Boot = store.BootCURE
	// A fresh boot window is a fresh CURE boot: a resumed run's wish for
	// one is met (the batch must not boot yet another).
	r.Pipeline.FreshCURE = ""
	r.Pipeline.CUREWindow = fmt.Sprintf("w%d", time.Now().UnixNano())
}

// Window is the id of the run's current boot window.
func Window(r store.Run) string { return nonEmpty(r.Pipeline.CUREWindow, "w0") }

// windowOpened is when the run's current boot window opened, read from its
// id (zero for "w0", a run without one).
func windowOpened(r store.Run) time.Time {
	ns, err := strconv.ParseInt(strings.TrimPrefix(r.Pipeline.CUREWindow, "w"), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// BootDecision implements Coordinator: a node boots CURE only
// while its active run has an open boot window; each answer then mints a
// per-boot token bound to the run, the window and the requesting address.
func (g *Gate) BootDecision(ctx context.Context, mac, peer string) (Decision, error) {
	return g.bootDecision(ctx, mac, peer, runstate.BootPathPXE)
}

// HTTPSBootDecision implements HTTPSBooter: the signed image,
// booted over UEFI HTTP, asks for its boot parameters over TLS. The same
// boot window, token budget and binding apply as to an iPXE script.
func (g *Gate) HTTPSBootDecision(ctx context.Context, mac, peer string) (Decision, error) {
	return g.bootDecision(ctx, mac, peer, runstate.BootPathHTTPS)
}

func (g *Gate) bootDecision(ctx context.Context, mac, peer, path string) (Decision, error) {
	n, err := g.cfg.Store.NodeByMAC(ctx, mac)
	if err != nil {
		if unknownMACErr(err) {
			g.UnknownMAC(ctx, mac, "iPXE", peer)
			if g.cfg.Enlist != nil {
				return g.cfg.Enlist(ctx, mac, peer)
			}
		}
		return Decision{}, fmt.Errorf("mac %s is not registered: %w", mac, err)
	}
	r, err := g.cfg.Store.LatestRun(ctx, n.ID)
	if err != nil || !runstate.Active(r.Status) {
		return Decision{Boot: false, Reason: "no active run"}, nil
	}
	if r.Pipeline.Boot != store.BootCURE {
		return Decision{Boot: false, Reason: "run " + r.ID + " wants the installed OS"}, nil
	}
	window := Window(r)
	if !g.cfg.BootIPUnbound {
		// Before the limits: a claimant that used up the window's tokens
		// must not hide a second one behind a refusal.
		if err := g.cfg.Store.ClaimBootWindow(ctx, r.ID, window, peer); err != nil {
			return Decision{}, g.claimRefused(ctx, n, r, mac, peer, path, err)
		}
	}
	ws, err := g.cfg.Store.BootWindow(ctx, r.ID, window)
	if err != nil {
		return Decision{}, err
	}
	if ws.Bound != nil {
		// Its claimant asking again (a retry, or the node rebooted on its
		// own): the boot that registered is the window's.
		return Decision{Boot: false, Reason: fmt.Sprintf("run %s: boot %s already registered in this boot window", r.ID, ws.Bound.BootID)}, nil
	}
	if err := g.tokenBudget(ctx, n, r, mac, peer, ws); err != nil {
		return Decision{}, err
	}
	tok := NewToken()
	issue := g.cfg.Store.ClaimBootToken
	if g.cfg.BootIPUnbound {
		issue = g.cfg.Store.IssueBootToken
	}
	err = issue(ctx, store.BootToken{
		Hash: store.TokenHash(tok), NodeID: n.ID, RunID: r.ID, Window: window, Peer: peer,
		Issued: time.Now(), Expires: time.Now().Add(g.cfg.WaitForCURE),
	}, g.cfg.TokensPerWindow)
	var contest *store.ContestedError
	switch {
	case errors.As(err, &contest) || errors.Is(err, store.ErrWindowContested):
		// A second claimant raced this one between the claim and the issue.
		return Decision{}, g.claimRefused(ctx, n, r, mac, peer, path, err)
	case errors.Is(err, store.ErrWindowFull):
		// Lost a race with a concurrent request for the same window.
		g.cfg.Audit.Security(ctx, store.AuditEntry{Actor: n.ID, Peer: peer, Action: audit.BootTokenRateLimit, RunID: r.ID, Nodes: []string{n.ID},
			Result: "refused", Detail: "iPXE script for " + mac + ": " + err.Error()})
		return Decision{}, fmt.Errorf("node %s: %v: %w", n.ID, err, ErrRateLimited)
	case err != nil:
		return Decision{}, err
	}
	what := "iPXE script served"
	if path == runstate.BootPathHTTPS {
		what = "boot parameters served over HTTPS (signed image, UEFI HTTP boot)"
	}
	g.cfg.Event(ctx, r, r.Phase, runstate.EventInfo, runstate.BootPathStatusPrefix+path, fmt.Sprintf("%s to %s from %s; per-boot token %d of at most %d in this boot window",
		what, mac, peer, ws.Issued+1, g.cfg.TokensPerWindow), 0)
	cmdline := fmt.Sprintf("cure.coordinator=%s cure.http=%s cure.node=%s cure.token=%s", nonEmpty(r.Pipeline.RunnerAddr, g.cfg.RunnerAddr), g.cfg.BaseURL, n.ID, tok)
	if len(n.Cabling) > 0 {
		// The cabling verdicts need every mapped port heard: the runner
		// listens for LLDP up to the 30 s interval switches send at, and
		// stops as soon as every port with link heard its switch.
		cmdline += " cure.lldp=" + LLDPWindow
	}
	return Decision{
		Boot: true,
		// The instance driving the run comes first in the runner's list, so
		// a node that PXE-booted from another instance still reaches it.
		Cmdline: cmdline,
		Reason:  "run " + r.ID,
	}, nil
}

// LLDPWindow is how long the runner of a node with a cabling map listens
// for LLDP at most (cure.lldp=): a switch's 30 s transmit interval and a
// port's link training.
const LLDPWindow = "35s"

// tokenBudget refuses a token past the window's or the node's budget, as
// a rate-limited security event.
func (g *Gate) tokenBudget(ctx context.Context, n store.Node, r store.Run, mac, peer string, ws store.WindowState) error {
	limited := ""
	switch {
	case ws.Issued >= g.cfg.TokensPerWindow:
		limited = fmt.Sprintf("%d boot tokens already issued in this boot window", ws.Issued)
	case !g.tokens.allow(n.ID):
		limited = fmt.Sprintf("more than %d boot tokens for the node in %s", g.cfg.TokensPerNode, g.cfg.TokenPeriod)
	}
	if limited == "" {
		return nil
	}
	g.cfg.Audit.Security(ctx, store.AuditEntry{Actor: n.ID, Peer: peer, Action: audit.BootTokenRateLimit, RunID: r.ID, Nodes: []string{n.ID},
		Result: "refused", Detail: "iPXE script for " + mac + ": " + limited})
	return fmt.Errorf("node %s: %s: %w", n.ID, limited, ErrRateLimited)
}

// claimRefused answers a boot-identity request whose window another
// address claimed: the first such request contests the window (the store
// revoked its tokens; the run stops in attention naming both addresses),
// a later one is refused. Neither claimant gets a token.
func (g *Gate) claimRefused(ctx context.Context, n store.Node, r store.Run, mac, peer, path string, err error) error {
	var ce *store.ContestedError
	if !errors.As(err, &ce) {
		if errors.Is(err, store.ErrWindowContested) {
			return fmt.Errorf("node %s run %s: boot token for %s from %s: %w (%w)", n.ID, r.ID, mac, peer, ErrContested, err)
		}
		return err
	}
	what := "the iPXE script"
	if path == runstate.BootPathHTTPS {
		what = "the HTTPS boot parameters"
	}
	detail := fmt.Sprintf("%s for %s asked from %s, but boot window %s was claimed from %s first", what, mac, peer, ce.Window, ce.First)
	if ce.Bound.BootID != "" {
		detail += fmt.Sprintf(" (boot %s registered from there)", ce.Bound.BootID)
	}
	detail += fmt.Sprintf(": two claimants for node %s (%s and %s); every token of the window is revoked and neither gets a secret", n.ID, ce.First, ce.Second)
	g.cfg.Audit.Security(ctx, store.AuditEntry{Actor: n.ID, Peer: peer, Action: audit.BootWindowContested, RunID: r.ID, Nodes: []string{n.ID},
		Result: "refused", Detail: detail})
	g.IdentityContested(ctx, r.ID, detail)
	return fmt.Errorf("node %s run %s: %s: %w", n.ID, r.ID, detail, ErrContested)
}

// HostReady implements Coordinator: the installed OS phoned home.
// It is accepted once, only while the run waits for it after the reboot out
// of CURE, before the wait's deadline, and with a token minted for one of
// this run's os_install assignments (or, in a run that returns a node to
// its installed OS, that OS's own, which waitForHostOSPhase added); the
// form is read only after all that. A provision's accepted token becomes
// the node's installed OS (Config.HostAccepted).
func (g *Gate) HostReady(ctx context.Context, nodeID, token, peer string, readForm func() (url.Values, error)) error {
	if _, err := g.cfg.Store.GetNode(ctx, nodeID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("node %s: %w", nodeID, ErrUnknownNode)
		}
		return err
	}
	r, rerr := g.cfg.Store.LatestRun(ctx, nodeID)
	refuse := func(why string) error {
		g.cfg.Audit.Security(ctx, store.AuditEntry{Actor: nodeID, Peer: peer, Action: audit.HostCallback, RunID: r.ID, Nodes: []string{nodeID},
			Result: "refused", Detail: why})
		return fmt.Errorf("host callback of node %s: %s: %w", nodeID, why, ErrUnauthorized)
	}
	if rerr != nil {
		return refuse("the node has no run")
	}
	got, match, matched := []byte(store.TokenHash(token)), 0, ""
	for _, want := range r.Pipeline.HostTokens {
		eq := subtle.ConstantTimeCompare(got, []byte(want))
		match |= eq
		if eq == 1 {
			matched = want
		}
	}
	if match != 1 {
		return refuse("token is not a host token of run " + r.ID)
	}
	waitFrom := r.Pipeline.Host.WaitFrom
	if r.Status != curev1.RunStatus_RUN_RUNNING || r.Phase != modes.WaitForHostOS {
		return refuse(fmt.Sprintf("run %s is %s in %s, not waiting for the installed OS", r.ID, r.Status, nonEmpty(r.Phase, "no phase")))
	}
	rebooted := r.Pipeline.Host.RebootedAt
	if rebooted.IsZero() {
		return refuse("the coordinator has not rebooted the node out of CURE yet")
	}
	if time.Since(rebooted) > g.cfg.HostOS {
		return refuse(fmt.Sprintf("the wait for the installed OS ended %s after the reboot", g.cfg.HostOS))
	}
	if s := g.cfg.Hub.Current(nodeID); s != nil && s.RunID == r.ID {
		return refuse("CURE is still connected for this run: the installed OS cannot be up")
	}
	form, err := readForm()
	if err != nil {
		return err
	}
	var parts []string
	for _, k := range []string{"instance_id", "hostname", "boot_id", "uptime_ms"} {
		if v := form.Get(k); v != "" {
			parts = append(parts, k+"="+textsafe.BoundedLine(v, 128))
		}
	}
	// One callback per wait: the event's (boot id, seq) key makes a replay a no-op the store refuses.
	_, inserted, err := g.cfg.Store.AppendEvent(ctx, store.Event{
		RunID: r.ID, NodeID: nodeID, Source: runstate.SourceHostOS, BootID: fmt.Sprintf("host-ready/%d", waitFrom), Seq: 1,
		Time: time.Now().UTC(), Phase: modes.WaitForHostOS, Kind: runstate.EventHostReady,
		Message: "host OS called back ready from " + peer + ": " + strings.Join(parts, " "),
	})
	if err != nil {
		return err
	}
	if !inserted {
		return refuse("already called back for this wait (replay)")
	}
	g.cfg.HostAccepted(ctx, r, matched)
	return nil
}

// IdentityContested implements server.RunGuard: two boots claimed one boot
// window, so nobody can tell which is the node. The run stops in attention
// for an operator, its sessions are closed and its tokens deleted.
func (g *Gate) IdentityContested(ctx context.Context, runID, detail string) {
	g.cfg.Hub.CloseRun(runID)
	g.cfg.Stop(runID, curev1.RunStatus_RUN_ATTENTION, "runner identity contested, run stopped: "+detail)
}

// tokenLimiter bounds the boot tokens one node may get in a period, across
// boot windows: a peer asking for a node's script in a loop gets refusals,
// not tokens and timeline entries.
type tokenLimiter struct {
	max    int
	period time.Duration
	mu     sync.Mutex
	issued map[string][]time.Time
}

func newTokenLimiter(max int, period time.Duration) *tokenLimiter {
	return &tokenLimiter{max: max, period: period, issued: map[string][]time.Time{}}
}

func (l *tokenLimiter) allow(node string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	recent := l.issued[node][:0]
	for _, t := range l.issued[node] {
		if now.Sub(t) < l.period {
			recent = append(recent, t)
		}
	}
	if len(recent) >= l.max {
		l.issued[node] = recent
		return false
	}
	l.issued[node] = append(recent, now)
	return true
}

// Claim is how a runner session stands with its boot window's claim.
type Claim struct {
	Settled bool
	At      time.Time // when it settles (zero: never, the window has two claimants)
	Why     string    // what it waits for
}

// Claim says whether session s of run r may be given work and
// secrets: at once if its boot passed attestation (its TPM proved it is
// the node); otherwise once its boot window has had one claimant for
// ClaimSettle since the coordinator opened it (armed PXE) or last powered
// the node, whichever is later. The real node asks within its power-on
// time, so a peer that took the window first is contested before it is
// given anything.
func (g *Gate) Claim(ctx context.Context, r store.Run, s *sessions.Session) (Claim, error) {
	if s.Attested {
		return Claim{Settled: true}, nil
	}
	ws, err := g.cfg.Store.BootWindow(ctx, r.ID, Window(r))
	if err != nil {
		return Claim{}, err
	}
	if ws.Contested || (!g.cfg.BootIPUnbound && len(ws.Claimants) > 1) {
		return Claim{Why: fmt.Sprintf("boot window %s has two claimants (%s)", Window(r), strings.Join(ws.Claimants, ", "))}, nil
	}
	from := windowOpened(r)
	if t := r.Pipeline.BootRequestedAt; t.After(from) {
		from = t
	}
	if from.IsZero() {
		from = cmp.Or(ws.FirstIssued, s.ConnectedAt)
	}
	at := from.Add(g.cfg.ClaimSettle)
	return Claim{Settled: !time.Now().Before(at), At: at,
		Why: fmt.Sprintf("the boot is not attested: its boot window's claim settles at %s (%s after the boot was requested, with one claimant)",
			at.UTC().Format(time.RFC3339), g.cfg.ClaimSettle)}, nil
}
