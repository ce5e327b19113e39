package boot

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLinkReady(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var since time.Time
	// Running: ready at once.
	if !linkReady(unix.IFF_UP|unix.IFF_RUNNING|unix.IFF_LOWER_UP, t0, &since) {
		t.Fatal("running link not ready")
	}
	// Carrier without the operational state: ready only after the settle.
	since = time.Time{}
	if linkReady(unix.IFF_UP|unix.IFF_LOWER_UP, t0, &since) {
		t.Fatal("fresh carrier counted before the settle")
	}
	if linkReady(unix.IFF_UP|unix.IFF_LOWER_UP, t0.Add(lowerUpSettle/2), &since) {
		t.Fatal("carrier counted halfway through the settle")
	}
	if !linkReady(unix.IFF_UP|unix.IFF_LOWER_UP, t0.Add(lowerUpSettle), &since) {
		t.Fatal("carrier for the whole settle not ready")
	}
	// Carrier lost: the settle starts again.
	if linkReady(unix.IFF_UP, t0.Add(2*lowerUpSettle), &since) || !since.IsZero() {
		t.Fatalf("no carrier counted ready (since %v)", since)
	}
	if linkReady(unix.IFF_UP|unix.IFF_LOWER_UP, t0.Add(3*lowerUpSettle), &since) {
		t.Fatal("carrier back counted without a new settle")
	}
}
