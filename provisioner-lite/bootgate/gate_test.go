package bootgate

import (
	"fmt"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestWindowOpened: a window's id is its opening time, read back for the
// claim's settling; a run without a window has "w0", opened at no time.
func TestWindowOpened(t *testing.T) {
	var r store.Run
	if Window(r) != "w0" || !windowOpened(r).IsZero() {
		t.Fatalf("no window: %q opened %v", Window(r), windowOpened(r))
	}
	before := time.Now()
	OpenWindow(&r)
	if r.Pipeline.Boot != store.BootCURE {
		t.Fatalf("boot %q after OpenWindow", r.Pipeline.Boot)
	}
	if at := windowOpened(r); at.Before(before) || at.After(time.Now()) {
		t.Fatalf("window %s opened %v, not between %v and now", Window(r), at, before)
	}
}

// TestTokenLimiter: a node gets max tokens per period, across windows.
func TestTokenLimiter(t *testing.T) {
	l := newTokenLimiter(2, time.Hour)
	if !l.allow("n1") || !l.allow("n1") {
		t.Fatal("first two tokens refused")
	}
	if l.allow("n1") {
		t.Fatal("third token in the period allowed")
	}
	if !l.allow("n2") {
		t.Fatal("another node's token refused")
	}
}

// TestUnknownMACWaitsBounded: each waiting run shows a MAC once and at
// most maxMACsPerWait of them (then says once there were more); with more
// than maxAnnotatedWaits runs waiting, none is shown.
func TestUnknownMACWaitsBounded(t *testing.T) {
	var w cureWaits
	w.add(store.Run{ID: "r1"}, time.Now())
	for i := range maxMACsPerWait {
		if show, _ := w.note(seenMAC{mac: fmt.Sprintf("mac%d", i), at: time.Now()}); len(show) != 1 {
			t.Fatalf("mac%d shown on %d runs", i, len(show))
		}
	}
	if show, full := w.note(seenMAC{mac: "mac0", at: time.Now()}); len(show)+len(full) != 0 {
		t.Fatal("a MAC shown twice")
	}
	if show, full := w.note(seenMAC{mac: "extra", at: time.Now()}); len(show) != 0 || len(full) != 1 {
		t.Fatalf("MAC past the bound: show %d, more %d", len(show), len(full))
	}
	if _, full := w.note(seenMAC{mac: "extra2", at: time.Now()}); len(full) != 0 {
		t.Fatal("'more' said twice")
	}
	w.remove("r1")
	for i := range maxAnnotatedWaits + 1 {
		w.add(store.Run{ID: fmt.Sprint("r", i)}, time.Now())
	}
	if show, full := w.note(seenMAC{mac: "new", at: time.Now()}); len(show)+len(full) != 0 {
		t.Fatalf("%d runs waiting: MAC shown", maxAnnotatedWaits+1)
	}
}
