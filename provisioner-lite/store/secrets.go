package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Secrets at rest (BMC passwords, PSIDs) are sealed with AES-256-GCM under a
// key the database does not hold; the row they belong to is the additional
// data, so a sealed value copied into another node's row does not open.
// Tokens are never stored at all: only their SHA-256 (TokenHash).

const sealedPrefix = "enc:v1:"

// ErrNoStateKey is returned when a literal secret must be sealed or opened by a
// store opened without WithStateKey.
var ErrNoStateKey = errors.New("the store was opened without a state key, so it cannot keep secrets")

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("state key is %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns "" for "" (nothing to hide) and enc:v1:<base64(nonce|ciphertext)> otherwise.
func (s *sealer) seal(plain, aad string) (string, error) {
	if plain == "" {
		return "", nil
	}
	if s == nil {
		return "", ErrNoStateKey
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := s.aead.Seal(nonce, nonce, []byte(plain), []byte(aad))
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(out), nil
}

func (s *sealer) open(stored, aad string) (string, error) {
	if stored == "" {
		return "", nil
	}
	if !strings.HasPrefix(stored, sealedPrefix) {
		return "", errors.New("secret is not sealed (written by an older coordinator and not yet upgraded)")
	}
	if s == nil {
		return "", ErrNoStateKey
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(stored, sealedPrefix))
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", errors.New("sealed secret is corrupt")
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], []byte(aad))
	if err != nil {
		return "", errors.New("sealed secret does not open with this state key (another state dir's key, or tampered)")
	}
	return string(plain), nil
}

// Additional data naming what a sealed value is, and whose.
func passwordAAD(nodeID string) string { return "bmc_password/" + nodeID }
func psidsAAD(nodeID string) string    { return "psids/" + nodeID }

// TokenHash is how the store names a bearer token: its SHA-256, hex. A copy of
// the database then holds nothing a peer could present.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// upgradeSecrets seals the secrets an older coordinator stored in clear and
// drops the clear host tokens it kept in run data. Without a key, clear
// secrets are left for the next start with one, and reading them fails.
func upgradeSecrets(ctx context.Context, db *sql.DB, seal *sealer) error {
	if _, err := db.ExecContext(ctx, `UPDATE runs SET data = json_remove(data, '$.host_token') WHERE json_extract(data, '$.host_token') IS NOT NULL`); err != nil {
		return fmt.Errorf("drop clear host tokens: %w", err)
	}
	if seal == nil {
		return nil
	}
	rows, err := db.QueryContext(ctx, `SELECT id, bmc_password, psids FROM nodes
WHERE (bmc_password != '' AND bmc_password NOT LIKE 'enc:%') OR (psids NOT IN ('', '{}') AND psids NOT LIKE 'enc:%')`)
	if err != nil {
		return fmt.Errorf("find clear secrets: %w", err)
	}
	type clearRow struct{ id, pw, psids string }
	var todo []clearRow
	for rows.Next() {
		var c clearRow
		if err := rows.Scan(&c.id, &c.pw, &c.psids); err != nil {
			rows.Close()
			return err
		}
		todo = append(todo, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range todo {
		pw, ps := c.pw, c.psids
		if pw != "" && !strings.HasPrefix(pw, sealedPrefix) {
			if pw, err = seal.seal(pw, passwordAAD(c.id)); err != nil {
				return err
			}
		}
		if ps != "" && ps != "{}" && !strings.HasPrefix(ps, sealedPrefix) {
			if ps, err = seal.seal(ps, psidsAAD(c.id)); err != nil {
				return err
			}
		}
		if _, err := db.ExecContext(ctx, `UPDATE nodes SET bmc_password = ?, psids = ? WHERE id = ?`, pw, ps, c.id); err != nil {
			return fmt.Errorf("seal secrets of node %s: %w", c.id, err)
		}
	}
	return nil
}
