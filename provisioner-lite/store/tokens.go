package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Per-boot tokens (docs/SECURITY.md, "Runner identity"). A token is minted
// for one boot window of one run; the first Hello binds it to that boot (boot
// id and the hash of the runner's session secret), which closes the window:
// the window's other tokens are revoked, and the run's older bindings are
// superseded. The store keeps only SHA-256 digests (TokenHash).

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
	// ErrPeerMismatch: the Hello came from another address than the one the
	// token was issued to; the token stays unbound.
	ErrPeerMismatch = errors.New("presented from another address than it was issued to")
)

// ContestedError says two different boots claimed one boot window: the
// coordinator cannot tell which is the node.
type ContestedError struct {
	Token BootToken // the token presented
	Bound BootToken // the binding already in place for its window
}

func (e *ContestedError) Error() string {
	return fmt.Sprintf("boot window %s of run %s was already registered by boot %s from %s at %s",
		e.Token.Window, e.Token.RunID, e.Bound.BootID, e.Bound.BoundPeer, e.Bound.BoundAt.Format(time.RFC3339))
}

// ErrWindowFull: the boot window already had its maximum of tokens.
var ErrWindowFull = errors.New("boot window has had its maximum of tokens")

// IssueBootToken records a freshly minted token (state issued), unless its
// boot window already had max tokens or a boot registered in it (counted in
// the same transaction, so concurrent requests cannot exceed it); max <= 0
// means no limit.
func (s *Store) IssueBootToken(ctx context.Context, t BootToken, max int) error {
	if len(t.Hash) != 64 {
		return fmt.Errorf("store: boot token for node %s: want its SHA-256 hex, got %d characters", t.NodeID, len(t.Hash))
	}
	if t.Expires.IsZero() || t.RunID == "" || t.Window == "" {
		return fmt.Errorf("store: boot token for node %s: run, window and expiry are required", t.NodeID)
	}
	if t.Issued.IsZero() {
		t.Issued = time.Now()
	}
	err := s.tx(ctx, func(tx *Tx) error {
		var n, bound int
		if err := tx.QueryRowContext(ctx, `SELECT count(*), count(CASE WHEN state = 'bound' THEN 1 END) FROM boot_tokens WHERE run_id = ? AND "window" = ?`,
			t.RunID, t.Window).Scan(&n, &bound); err != nil {
			return err
		}
		if bound > 0 || (max > 0 && n >= max) {
			return fmt.Errorf("%w (%d issued, max %d, registered %t)", ErrWindowFull, n, max, bound > 0)
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO boot_tokens (token_sha256, node_id, run_id, "window", peer, issued_at, expires, state)
VALUES (?, ?, ?, ?, ?, ?, ?, 'issued')`, t.Hash, t.NodeID, t.RunID, t.Window, t.Peer, toMs(t.Issued), toMs(t.Expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: issue boot token for node %s run %s: %w", t.NodeID, t.RunID, err)
	}
	return nil
}

// WindowState says how many tokens a boot window has had and which boot, if
// any, registered in it.
type WindowState struct {
	Issued int
	Bound  *BootToken
}

// BootWindow returns the state of one boot window of a run.
func (s *Store) BootWindow(ctx context.Context, runID, window string) (WindowState, error) {
	var ws WindowState
	rows, err := s.r.QueryContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE run_id = ? AND "window" = ?`, runID, window)
	if err != nil {
		return ws, fmt.Errorf("store: boot window %s of run %s: %w", window, runID, err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return ws, fmt.Errorf("store: boot window %s of run %s: %w", window, runID, err)
		}
		ws.Issued++
		if t.State == TokenBound {
			ws.Bound = &t
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
	RequirePeer bool   // refuse an unbound token presented from another address
	Now         time.Time
}

// Bind outcomes.
const (
	Bound   = "bound"   // first Hello of the boot: the window is now closed
	Resumed = "resumed" // the same boot reconnecting (same boot id and session secret)
)

// BindBootToken consumes a token for a boot, atomically. It returns Bound or
// Resumed and the token; otherwise an error wrapping ErrNotFound, ErrExpired,
// ErrStale or ErrPeerMismatch, or a *ContestedError when another boot already
// registered in the token's window (the presented token is then left as it was).
func (s *Store) BindBootToken(ctx context.Context, req BindRequest) (string, BootToken, error) {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	if req.BootID == "" || len(req.SessionHash) != 64 {
		return "", BootToken{}, errors.New("store: bind boot token: boot id and session hash are required")
	}
	var outcome string
	var tok BootToken
	err := s.tx(ctx, func(tx *Tx) error {
		t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE token_sha256 = ?`, req.Hash))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		tok = t
		boundInWindow := func() (*BootToken, error) {
			b, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM boot_tokens WHERE run_id = ? AND "window" = ? AND state = 'bound'`, t.RunID, t.Window))
			if errors.Is(err, sql.ErrNoRows) {
				return nil, nil
			}
			return &b, err
		}
		switch t.State {
		case TokenBound:
			if t.BootID == req.BootID && subtle.ConstantTimeCompare([]byte(t.SessionHash), []byte(req.SessionHash)) == 1 {
				outcome = Resumed
				return nil
			}
			return &ContestedError{Token: t, Bound: t}
		case TokenRevoked:
			if t.RevokedWhy == RevokedWindow {
				if b, err := boundInWindow(); err != nil {
					return err
				} else if b != nil {
					return &ContestedError{Token: t, Bound: *b}
				}
			}
			return ErrStale
		}
		if !req.Now.Before(t.Expires) {
			return fmt.Errorf("expired at %s: %w", t.Expires.Format(time.RFC3339), ErrExpired)
		}
		if b, err := boundInWindow(); err != nil {
			return err
		} else if b != nil {
			return &ContestedError{Token: t, Bound: *b}
		}
		if req.RequirePeer && t.Peer != "" && t.Peer != req.Peer {
			return fmt.Errorf("issued to %s, presented from %s: %w", t.Peer, req.Peer, ErrPeerMismatch)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'bound', boot_id = ?, session_sha256 = ?, bound_at = ?, bound_peer = ?
WHERE token_sha256 = ?`, req.BootID, req.SessionHash, toMs(req.Now), req.Peer, req.Hash); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'window'
WHERE run_id = ? AND "window" = ? AND state = 'issued'`, t.RunID, t.Window); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE boot_tokens SET state = 'revoked', revoked_why = 'stale'
WHERE run_id = ? AND "window" != ? AND state IN ('issued', 'bound')`, t.RunID, t.Window); err != nil {
			return err
		}
		tok.State, tok.BootID, tok.SessionHash, tok.BoundAt, tok.BoundPeer = TokenBound, req.BootID, req.SessionHash, req.Now, req.Peer
		outcome = Bound
		return nil
	})
	if err != nil {
		var ce *ContestedError
		if errors.As(err, &ce) {
			return "", tok, err
		}
		return "", tok, fmt.Errorf("store: boot token: %w", err)
	}
	return outcome, tok, nil
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

// PruneBootTokens deletes unbound tokens that expired before t, and every
// token of a run that is no longer active (a safety net for DeleteRunBootTokens).
func (s *Store) PruneBootTokens(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens
WHERE (state != 'bound' AND expires < ?)
   OR run_id IN (SELECT id FROM runs WHERE status NOT IN ('pending', 'running'))`, toMs(before))
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
