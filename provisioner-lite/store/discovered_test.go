package store

import (
	"errors"
	"testing"
	"time"
)

// Records are capped (approved ones don't count), a second boot of one MAC
// replaces its token, a token reports once, and an approved record stays so.
func TestDiscoveredCapAndToken(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	exp := time.Now().Add(time.Minute)
	id, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:01", Peer: "10.0.0.1", TokenHash: TokenHash("a"), TokenExpires: exp}, 2)
	if err != nil || id != "disc-020000000001" {
		t.Fatalf("EnlistBoot = %q, %v", id, err)
	}
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:01", TokenHash: TokenHash("b"), TokenExpires: exp}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiscoveredByToken(ctx, TokenHash("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replaced token still found: %v", err)
	}
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:02", TokenHash: TokenHash("c"), TokenExpires: exp}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:03", TokenHash: TokenHash("d"), TokenExpires: exp}, 2); !errors.Is(err, ErrDiscoveredFull) {
		t.Fatalf("third record past a cap of 2: %v", err)
	}
	if err := s.RecordInspection(ctx, TokenHash("b"), []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordInspection(ctx, TokenHash("b"), []byte{3}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second report with one token: %v", err)
	}
	d, err := s.GetDiscovered(ctx, id)
	if err != nil || d.State != DiscoveredReported || string(d.Report) != "\x01\x02" || d.TokenHash != "" {
		t.Fatalf("record %+v, %v", d, err)
	}
	if err := s.ApproveDiscovered(ctx, id, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ApproveDiscovered(ctx, id, "n2"); !errors.Is(err, ErrNodeExists) {
		t.Fatalf("second approval: %v", err)
	}
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:03", TokenHash: TokenHash("e"), TokenExpires: exp}, 2); err != nil {
		t.Fatalf("approved records count against the cap: %v", err)
	}
	if l, _ := s.ListDiscovered(ctx, false); len(l) != 2 {
		t.Fatalf("%d pending records, want 2", len(l))
	}
	if l, _ := s.ListDiscovered(ctx, true); len(l) != 3 {
		t.Fatalf("%d records, want 3", len(l))
	}
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:04", TokenHash: TokenHash("f"), TokenExpires: time.Now().Add(-time.Second)}, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiscoveredByToken(ctx, TokenHash("f")); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	// The expired, never reported record makes room for a new one.
	if _, err := s.EnlistBoot(ctx, Discovered{MAC: "02:00:00:00:00:05", TokenHash: TokenHash("g"), TokenExpires: exp}, 3); err != nil {
		t.Fatalf("an expired unreported record still counts: %v", err)
	}
	if _, err := s.GetDiscovered(ctx, DiscoveredID("02:00:00:00:00:04")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired unreported record kept: %v", err)
	}
}
