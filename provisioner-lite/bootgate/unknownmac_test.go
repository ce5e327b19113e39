package bootgate

import (
	"bytes"
	"context"
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
