package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Per-boot tokens (docs/SECURITY.md, "Runner identity"). A token is minted
// for one boot window of one run; the first Hello binds it to that boot (boot
// id and the hash of the runner's session secret), which closes the window:
// the window's other tokens are revoked, and the run's older bindings are
// superseded. The store keeps only SHA-256 digests (TokenHash).
//
// Where a boot's address is its identity (ClaimBootToken, RequirePeer), the
// address the window's first token went to is the window's claimant: a
// request from another address, before or after a Hello bound the window,
// is a second claimant. The coordinator cannot tell which is the node, so
// every token of the window is revoked (RevokedContested) and it mints no
// more.

// Token states as stored.
const (
	TokenIssued  = "issued"
	TokenBound   = "bound"
	TokenRevoked = "revoked"
)

// Why a token was revoked.
const (
	RevokedWindow = "window" // another token of its window was bound first
	RevokedStale  = "stale"  // a newer window of the run, or the window ended
	// RevokedContested: two addresses claimed the token's window.
	RevokedContested = "contested"
)

// BootToken is one minted token, by hash.
type BootToken struct {
	Hash, NodeID, RunID, Window string
	Peer                        string // IP that fetched the iPXE script
	Issued, Expires             time.Time
	State, RevokedWhy           string
	BootID, SessionHash         string
	BoundPeer                   string
	BoundAt                     time.Time
}

// Errors of BindBootToken besides ErrNotFound and ErrExpired.
var (
	// ErrStale: the token was superseded (a newer boot window of its run).
	ErrStale = errors.New("superseded by a newer boot of the run")
	// ErrWindowContested: the window was contested earlier; none of its
	// tokens opens anything and it mints no more.
	ErrWindowContested = errors.New("boot window contested by two claimants: its tokens are revoked")
)

// ContestedError says two parties claimed one boot window (two boots, or
// two addresses): the coordinator cannot tell which is the node. Every
// token of the window was revoked when it was returned.
type ContestedError struct {
	RunID, Window string
	// First is the claimant in place (the address its tokens went to, or
	// that registered), Second the one that came after.
	First, Second string
	// Bound is the binding already in place for the window (zero if no
	// boot registered yet).
	Bound BootToken
	// Token is the token presented (zero for a token request).
	Token BootToken
}

func (e *ContestedError) Error() string {
	if e.Bound.BootID != "" {
		return fmt.Sprintf("boot window %s of run %s: claimed from %s, where boot %s from %s registered first at %s",
			e.Window, e.RunID, e.Second, e.Bound.BootID, e.First, e.Bound.BoundAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("boot window %s of run %s: claimed from %s, whose tokens went to %s first", e.Window, e.RunID, e.Second, e.First)
}

// ErrWindowFull: the boot window already had its maximum of tokens.
var ErrWindowFull = errors.New("boot window has had its maximum of tokens")

// IssueBootToken records a freshly minted token (state issued), unless its
// boot window already had max tokens or a boot registered in it (counted in
// the same transaction, so concurrent requests cannot exceed it); max <= 0
// means no limit. Addresses are not identities here (--bind-boot-ip=false):
// see ClaimBootToken.
func (s *Store) IssueBootToken(ctx context.Context, t BootToken, max int) error {
	return s.issueBootToken(ctx, t, max, false)
}

// ClaimBootToken is IssueBootToken where a boot's address is its identity:
// t.Peer must be the window's claimant (the address of its first token), or
// the window's first. A request from another address returns a
// *ContestedError and revokes every token of the window; a window contested
// before returns ErrWindowContested. Both are checked before the limits,
// in the same transaction: a claimant that used up the window's tokens
// does not keep a second one from being seen.
func (s *Store) ClaimBootToken(ctx context.Context, t BootToken, max int) error {
	return s.issueBootToken(ctx, t, max, true)
}

func (s *Store) issueBootToken(ctx context.Context, t BootToken, max int, oneClaimant bool) error {
	if len(t.Hash) != 64 {
		return fmt.Errorf("store: boot token for node %s: want its SHA-256 hex, got %d characters", t.NodeID, len(t.Hash))
	}
	if t.Expires.IsZero() || t.RunID == "" || t.Window == "" {
		return fmt.Errorf("store: boot token for node %s: run, window and expiry are required", t.NodeID)
	}
	if t.Issued.IsZero() {
		t.Issued = time.Now()
	}
	var contest *ContestedError
	err := s.tx(ctx, func(tx *Tx) error {
		ws, err := windowTx(ctx, tx, t.RunID, t.Window)
		if err != nil {
			return err
		}
		if oneClaimant {
			if contest, err = claimTx(ctx, tx, ws, t.RunID, t.Window, t.Peer); err != nil || contest != nil {
				return err // a contest is committed: its revocations must hold
			}
		}
		if ws.Bound != nil || (max > 0 && ws.Issued >= max) {
			return fmt.Errorf("%w (%d issued, max %d, registered %t)", ErrWindowFull, ws.Issued, max, ws.Bound != nil)
		}
		_, err = tx.ExecContext(ctx, `
INSERT INTO boot_tokens (token_sha256, node_id, run_id, "window", peer, issued_at, expires, state)
VALUES (?, ?, ?, ?, ?, ?, ?, 'issued')`, t.Hash, t.NodeID, t.RunID, t.Window, t.Peer, toMs(t.Issued), toMs(t.Expires))
		return err
	})
	if err == nil && contest != nil {
		return contest
	}
	if err != nil {
		return fmt.Errorf("store: issue boot token for node %s run %s: %w", t.NodeID, t.RunID, err)
	}
	return nil
}

// ClaimBootWindow checks that peer may claim a run's boot window without
// minting anything: nil when the window has no claimant yet or peer is it;
// a *ContestedError (every token of the window revoked) when another
// address claims it; ErrWindowContested when it was contested before. The
// boot server asks it before its rate limits, so a peer that used up the
// window's tokens cannot hide a second claimant behind a refusal.
func (s *Store) ClaimBootWindow(ctx context.Context, runID, window, peer string) error {
	var contest *ContestedError
	err := s.tx(ctx, func(tx *Tx) error {
		ws, err := windowTx(ctx, tx, runID, window)
		if err != nil {
			return err
		}
		contest, err = claimTx(ctx, tx, ws, runID, window, peer)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: claim boot window %s of run %s: %w", window, runID, err)
	}
	if contest != nil {
		return contest
	}
	return nil
}

// claimTx judges peer's claim on a window as ws shows it: a contested
// window is refused, another claimant contests it (revoking every token of
// the window in tx, which the caller must commit).
func claimTx(ctx context.Context, tx *Tx, ws WindowState, runID, window, peer string) (*ContestedError, error) {
	if ws.Contested {
		return nil, ErrWindowContested
	}
	first := ""
	if len(ws.Claimants) > 0 {
		first = ws.Claimants[0]
	}
	if len(ws.Claimants) == 0 || (len(ws.Claimants) == 1 && first == peer) {
		return nil, nil
	}
	ce := &ContestedError{RunID: runID, Window: window, First: first, Second: peer}
	if ws.Bound != nil {
		ce.Bound = *ws.Bound
	}
	if first == peer { // already two claimants (tokens issued without the rule): the other is the second
		ce.Second = ws.Claimants[1]
	}
	return ce, contestTx(ctx, tx, runID, window)
}

// contestTx revokes every token of a window, bound or not: two parties
// claimed it, so none of its tokens opens a session any more.
func contestTx(ctx context.Context, tx *Tx, runID, window string) error {
	_, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'contested'
WHERE run_id = ? AND "window" = ?`, runID, window)
	return err
}

// WindowState says how many tokens a boot window has had, which boot, if
// any, registered in it, and who claimed it.
type WindowState struct {
	Issued int
	Bound  *BootToken
	// Claimants are the distinct addresses the window's tokens went to,
	// first claimant first (where addresses are identities, a boot
	// registers only from its token's).
	Claimants []string
	// Contested: two claimants were seen; every token is revoked.
	Contested bool
	// FirstIssued is when its first token was minted (zero: none yet).
	FirstIssued time.Time
}

// BootWindow returns the state of one boot window of a run.
func (s *Store) BootWindow(ctx context.Context, runID, window string) (WindowState, error) {
	ws, err := windowTx(ctx, s.r, runID, window)
	if err != nil {
		return ws, fmt.Errorf("store: boot window %s of run %s: %w", window, runID, err)
	}
	return ws, nil
}

// querier is a transaction or the store's readers.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func windowTx(ctx context.Context, q querier, runID, window string) (WindowState, error) {
	var ws WindowState
	rows, err := q.QueryContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE run_id = ? AND "window" = ? ORDER BY issued_at, token_sha256`, runID, window)
	if err != nil {
		return ws, err
	}
	defer rows.Close()
	claimant := func(addr string) {
		if !slices.Contains(ws.Claimants, addr) {
			ws.Claimants = append(ws.Claimants, addr)
		}
	}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return ws, err
		}
		if ws.Issued == 0 {
			ws.FirstIssued = t.Issued
		}
		ws.Issued++
		claimant(t.Peer)
		switch {
		case t.State == TokenBound:
			ws.Bound = &t
		case t.State == TokenRevoked && t.RevokedWhy == RevokedContested:
			ws.Contested = true
			if t.BootID != "" {
				ws.Bound = &t // the registration the contest ended
			}
		}
	}
	return ws, rows.Err()
}

// LookupBootToken returns a token by hash, whatever its state; an unknown one
// wraps ErrNotFound.
func (s *Store) LookupBootToken(ctx context.Context, hash string) (BootToken, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE token_sha256 = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return BootToken{}, fmt.Errorf("store: boot token: %w", ErrNotFound)
	}
	if err != nil {
		return BootToken{}, fmt.Errorf("store: boot token: %w", err)
	}
	return t, nil
}

// BindRequest is a Hello presenting a token.
type BindRequest struct {
	Hash        string // TokenHash of the presented token
	BootID      string
	SessionHash string // TokenHash of the runner's session secret
	Peer        string // the Hello's source address
	// RequirePeer: the boot's address is its identity. An unbound token
	// presented from another address than its window's claimant is a
	// second claimant (a contest); a bound boot resuming with its secret
	// may come from anywhere (its secret proves it).
	RequirePeer bool
	Now         time.Time
}

// Bind outcomes.
const (
	Bound   = "bound"   // first Hello of the boot: the window is now closed
	Resumed = "resumed" // the same boot reconnecting (same boot id and session secret)
)

// BindBootToken consumes a token for a boot, atomically. It returns Bound or
// Resumed and the token; otherwise an error wrapping ErrNotFound, ErrExpired,
// ErrStale or ErrWindowContested, or a *ContestedError when another boot
// already registered in the token's window or (RequirePeer) another address
// claims it: every token of the window is then revoked.
func (s *Store) BindBootToken(ctx context.Context, req BindRequest) (string, BootToken, error) {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	if req.BootID == "" || len(req.SessionHash) != 64 {
		return "", BootToken{}, errors.New("store: bind boot token: boot id and session hash are required")
	}
	var outcome string
	var tok BootToken
	var contest *ContestedError
	err := s.tx(ctx, func(tx *Tx) error {
		t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE token_sha256 = ?`, req.Hash))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		tok = t
		outcome, contest, err = bindTx(ctx, tx, t, req)
		return err // nil with a contest: its revocations must hold
	})
	switch {
	case err != nil:
		return "", tok, fmt.Errorf("store: boot token: %w", err)
	case contest != nil:
		contest.Token = tok
		return "", tok, contest
	}
	if outcome == Bound {
		tok.State, tok.BootID, tok.SessionHash, tok.BoundAt, tok.BoundPeer = TokenBound, req.BootID, req.SessionHash, req.Now, req.Peer
	}
	return outcome, tok, nil
}

// bindTx is BindBootToken's decision and writes for token t, in tx.
func bindTx(ctx context.Context, tx *Tx, t BootToken, req BindRequest) (string, *ContestedError, error) {
	if t.State == TokenBound && t.BootID == req.BootID && subtle.ConstantTimeCompare([]byte(t.SessionHash), []byte(req.SessionHash)) == 1 {
		return Resumed, nil, nil
	}
	if t.State == TokenRevoked && t.RevokedWhy == RevokedContested {
		return "", nil, ErrWindowContested
	}
	ws, err := windowTx(ctx, tx, t.RunID, t.Window)
	if err != nil {
		return "", nil, err
	}
	if ws.Bound != nil {
		// Another boot (or this token with another secret) registered
		// first: two parties claim the window.
		ce := &ContestedError{RunID: t.RunID, Window: t.Window, First: ws.Bound.BoundPeer, Second: req.Peer, Bound: *ws.Bound}
		return "", ce, contestTx(ctx, tx, t.RunID, t.Window)
	}
	if t.State == TokenRevoked {
		return "", nil, ErrStale
	}
	if !req.Now.Before(t.Expires) {
		return "", nil, fmt.Errorf("expired at %s: %w", t.Expires.Format(time.RFC3339), ErrExpired)
	}
	if req.RequirePeer {
		if ce, err := claimTx(ctx, tx, ws, t.RunID, t.Window, req.Peer); err != nil || ce != nil {
			return "", ce, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'bound', boot_id = ?, session_sha256 = ?, bound_at = ?, bound_peer = ?
WHERE token_sha256 = ?`, req.BootID, req.SessionHash, toMs(req.Now), req.Peer, req.Hash); err != nil {
		return "", nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'window'
WHERE run_id = ? AND "window" = ? AND state = 'issued'`, t.RunID, t.Window); err != nil {
		return "", nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'stale'
WHERE run_id = ? AND "window" != ? AND state IN ('issued', 'bound')`, t.RunID, t.Window); err != nil {
		return "", nil, err
	}
	return Bound, nil, nil
}

// EndBootWindow revokes the tokens of a run's window that nobody used (the
// wait for CURE ended), so a late Hello with one is refused.
func (s *Store) EndBootWindow(ctx context.Context, runID, window string) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'stale'
WHERE run_id = ? AND "window" = ? AND state = 'issued'`, runID, window)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: end boot window %s of run %s: %w", window, runID, err)
	}
	return nil
}

// DeleteRunBootTokens deletes every token and binding of a run: it has ended,
// so no session may attach to it any more.
func (s *Store) DeleteRunBootTokens(ctx context.Context, runID string) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens WHERE run_id = ?`, runID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: delete boot tokens of run %s: %w", runID, err)
	}
	return nil
}

// EndRunBootTokens ends the tokens of a run that has ended: every one is
// deleted but the binding of the boot that registered, kept until
// keepUntil (its expiry) so that this boot, presenting its token with its
// session secret, is told its run ended rather than refused as a stranger
// (docs/SECURITY.md). It opens no session: its run is not active.
func (s *Store) EndRunBootTokens(ctx context.Context, runID string, keepUntil time.Time) error {
	err := s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens WHERE run_id = ? AND state != 'bound'`, runID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET expires = ? WHERE run_id = ? AND state = 'bound'`, toMs(keepUntil), runID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: end boot tokens of run %s: %w", runID, err)
	}
	return nil
}

// PruneBootTokens deletes unbound tokens that expired before t, and every
// token of a run that is no longer active but a binding EndRunBootTokens
// keeps until its expiry (a safety net for EndRunBootTokens).
func (s *Store) PruneBootTokens(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens
WHERE (state != 'bound' AND expires < ?)
   OR (run_id IN (SELECT id FROM runs WHERE status NOT IN ('pending', 'running')) AND (state != 'bound' OR expires < ?))`, toMs(before), toMs(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune boot tokens: %w", err)
	}
	return n, nil
}

const tokenCols = `token_sha256, node_id, run_id, "window", peer, issued_at, expires, state, revoked_why, boot_id, session_sha256, bound_at, bound_peer`

func scanToken(sc scanner) (BootToken, error) {
	var t BootToken
	var issued, expires, bound int64
	err := sc.Scan(&t.Hash, &t.NodeID, &t.RunID, &t.Window, &t.Peer, &issued, &expires, &t.State, &t.RevokedWhy,
		&t.BootID, &t.SessionHash, &bound, &t.BoundPeer)
	t.Issued, t.Expires, t.BoundAt = fromMs(issued), fromMs(expires), fromMs(bound)
	return t, err
}
