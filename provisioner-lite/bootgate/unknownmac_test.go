package bootgate

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestUnknownMACJudgedFromCurrentInventory: a listener's copy of the
// inventory may predate the import that fixed a node's MAC; a request it
// calls unknown is shown only if the MAC is unknown now, so no warning
// blames the corrected MAC.
func TestUnknownMACJudgedFromCurrentInventory(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	const fixed, stranger = "52:54:00:c0:de:01", "52:54:00:c0:de:77"
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://192.0.2.1", BMCUser: "admin", BMCPassword: "pw", MACs: []string{fixed}}); err != nil {
		t.Fatal(err)
	}
	var shown []string
	g := New(Config{Store: st, TokensPerNode: 1, TokenPeriod: time.Minute,
		Event: func(_ context.Context, _ store.Run, _ modes.PhaseName, _ runstate.EventKind, _, msg string, _ time.Duration) {
			shown = append(shown, msg)
		}})
	g.WaitForCURE(store.Run{ID: "r1", NodeID: "n1"})
	g.UnknownMAC(ctx, fixed, "proxy DHCP", "10.0.2.15")
	if len(shown) != 0 {
		t.Fatalf("a MAC in the inventory now was shown as unknown: %q", shown)
	}
	g.UnknownMAC(ctx, stranger, "proxy DHCP", "10.0.2.16")
	if len(shown) != 1 || !strings.Contains(shown[0], stranger) || !strings.Contains(shown[0], "its inventory MACs ("+fixed+") are wrong") {
		t.Fatalf("a stranger's request: %q", shown)
	}
}

// TestUnknownMACBeforeWaitShown: a fast node's iPXE may ask before a
// loaded coordinator has registered the wait its power-on began, and asks
// once: the wait shows, once, the unknown MACs of the moment before it,
// judged from the inventory as it is when the wait starts; older ones,
// and more than the recent list holds, are not shown.
func TestUnknownMACBeforeWaitShown(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	const known, stranger, fixedSince = "52:54:00:c0:de:01", "52:54:00:c0:de:77", "52:54:00:c0:de:78"
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://192.0.2.1", BMCUser: "admin", BMCPassword: "pw", MACs: []string{known}}); err != nil {
		t.Fatal(err)
	}
	var shown []string
	g := New(Config{Store: st, TokensPerNode: 1, TokenPeriod: time.Minute,
		Event: func(_ context.Context, _ store.Run, _ modes.PhaseName, _ runstate.EventKind, _, msg string, _ time.Duration) {
			shown = append(shown, msg)
		}})
	g.UnknownMAC(ctx, stranger, "iPXE", "10.0.2.16")
	g.UnknownMAC(ctx, fixedSince, "iPXE", "10.0.2.17")
	if len(shown) != 0 {
		t.Fatalf("shown with no run waiting: %q", shown)
	}
	if err := st.UpsertNode(ctx, store.Node{ID: "n2", BMCURL: "https://192.0.2.2", BMCUser: "admin", BMCPassword: "pw", MACs: []string{fixedSince}}); err != nil {
		t.Fatal(err)
	}
	g.WaitForCURE(store.Run{ID: "r1", NodeID: "n1"})
	if len(shown) != 1 || !strings.Contains(shown[0], "iPXE request from "+stranger+" from 10.0.2.16") || !strings.Contains(shown[0], "its inventory MACs ("+known+") are wrong") {
		t.Fatalf("the request of the moment before the wait: %q", shown)
	}
	g.UnknownMAC(ctx, stranger, "iPXE", "10.0.2.16")
	if len(shown) != 1 {
		t.Fatalf("a MAC shown twice on one wait: %q", shown)
	}
	// Past the window, and past the list's bound, nothing is shown.
	var w cureWaits
	w.note(seenMAC{mac: "old", at: time.Now()})
	if show := w.add(store.Run{ID: "r2"}, time.Now().Add(recentUnknownFor+time.Second)); len(show) != 0 {
		t.Fatalf("a request older than %s shown: %+v", recentUnknownFor, show)
	}
	for i := range 3 * maxRecentUnknown {
		w.note(seenMAC{mac: fmt.Sprint("m", i), at: time.Now()})
	}
	if len(w.recent) != maxRecentUnknown {
		t.Fatalf("%d recent MACs kept, want at most %d", len(w.recent), maxRecentUnknown)
	}
}
