package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"
)

// StartCluster starts a private cluster outside a test (a benchmark's
// command); Stop it when done.
func StartCluster() (*Cluster, error) { return start() }

// CreateDatabase creates a fresh database and returns its DSN (outside a
// test; NewDatabase within one).
func (c *Cluster) CreateDatabase(ctx context.Context) (string, error) {
	b := make([]byte, 6)
	rand.Read(b)
	name := "b_" + hex.EncodeToString(b)
	db, err := sql.Open("pgx", c.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return c.DSN(name), nil
}
