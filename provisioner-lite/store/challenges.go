package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrChallengeUsed is TakeAttestChallenge's answer for a challenge that
// was taken already (by this instance or another).
var ErrChallengeUsed = errors.New("challenge used already")

// AttestChallenge is an issued attestation challenge as every coordinator
// instance sharing the database sees it: what the Hello that answers it
// is judged against. The credential's secret is kept as its sha256 only,
// so a reader of the database cannot answer a challenge for a TPM.
type AttestChallenge struct {
	ID, TokenHash, BootID string
	EKPublic, EKCert      []byte
	EKChain               []byte // the intermediates the boot presented, DER concatenated
	AKPublic              []byte
	PCRs                  []uint32
	Nonce                 []byte
	SecretSHA256          string
	IssuedAt, Expires     time.Time
}

// PutAttestChallenge keeps an issued challenge, after pruning expired
// ones and, past keep kept, the oldest (a flood of BeginAttestation calls
// never grows the table beyond keep).
func (s *Store) PutAttestChallenge(ctx context.Context, c AttestChallenge, keep int) error {
	pcrs, err := json.Marshal(c.PCRs)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM attest_challenges WHERE expires_at < ?`, toMs(c.IssuedAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM attest_challenges WHERE issued_at <= (SELECT issued_at FROM attest_challenges ORDER BY issued_at DESC LIMIT 1 OFFSET ?)`, max(keep, 1)-1); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO attest_challenges (id, token_hash, boot_id, ek_public, ek_cert, ek_chain, ak_public, pcrs, nonce, secret_sha256, issued_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.ID, c.TokenHash, c.BootID, nonNil(c.EKPublic), nonNil(c.EKCert), nonNil(c.EKChain), nonNil(c.AKPublic),
			string(pcrs), nonNil(c.Nonce), c.SecretSHA256, toMs(c.IssuedAt), toMs(c.Expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: keep attestation challenge %s: %w", c.ID, err)
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// TakeAttestChallenge spends a challenge and returns it: a compare-and-set
// on used_at, so of two instances (or two Hellos) taking one challenge
// exactly one gets it. ErrChallengeUsed if it was spent already,
// ErrNotFound if it was never issued or has been pruned. by names the
// taker (the instance) in the row, for a post-mortem.
func (s *Store) TakeAttestChallenge(ctx context.Context, id, by string, now time.Time) (AttestChallenge, error) {
	var taken bool
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE attest_challenges SET used_at = ?, used_by = ? WHERE id = ? AND used_at = 0`, max(toMs(now), 1), by, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		taken = n == 1
		return err
	})
	if err != nil {
		return AttestChallenge{}, fmt.Errorf("store: take attestation challenge %s: %w", id, err)
	}
	c := AttestChallenge{ID: id}
	var pcrs string
	var issued, expires, used int64
	err = s.r.QueryRowContext(ctx, `SELECT token_hash, boot_id, ek_public, ek_cert, ek_chain, ak_public, pcrs, nonce, secret_sha256, issued_at, expires_at, used_at
FROM attest_challenges WHERE id = ?`, id).Scan(&c.TokenHash, &c.BootID, &c.EKPublic, &c.EKCert, &c.EKChain, &c.AKPublic, &pcrs, &c.Nonce, &c.SecretSHA256, &issued, &expires, &used)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return AttestChallenge{}, fmt.Errorf("store: attestation challenge %s: %w", id, ErrNotFound)
	case err != nil:
		return AttestChallenge{}, fmt.Errorf("store: attestation challenge %s: %w", id, err)
	case !taken:
		return AttestChallenge{}, fmt.Errorf("store: attestation challenge %s (at %s): %w", id, fromMs(used).Format(time.RFC3339Nano), ErrChallengeUsed)
	}
	if err := json.Unmarshal([]byte(pcrs), &c.PCRs); err != nil {
		return AttestChallenge{}, fmt.Errorf("store: attestation challenge %s: PCR list: %w", id, err)
	}
	c.IssuedAt, c.Expires = fromMs(issued), fromMs(expires)
	return c, nil
}
