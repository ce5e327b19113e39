package netboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// The inventory copy answers from memory; misses read it again at most
// once per MinAge, in the background, one read at a time; a failed read
// keeps the copy.
func TestMACInventoryRefresh(t *testing.T) {
	var mu sync.Mutex
	src := map[string]string{"52:54:00:00:00:01": "n1"}
	var fail error
	load := func(context.Context) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for k, v := range src {
			out[k] = v
		}
		return out, fail
	}
	inv, err := NewMACInventory(context.Background(), load, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	inv.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	if n, ok := inv.Lookup("52:54:00:00:00:01"); !ok || n != "n1" {
		t.Fatalf("known MAC: %q %v", n, ok)
	}
	mu.Lock()
	src["52:54:00:00:00:02"] = "N2"
	mu.Unlock()
	// A flood of misses within MinAge reads nothing.
	for i := 0; i < 10000; i++ {
		if _, ok := inv.Lookup(fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)); ok {
			t.Fatal("a MAC outside the inventory was found")
		}
		inv.Missed()
	}
	if inv.Loads() != 1 {
		t.Fatalf("%d reads within MinAge, want only the first", inv.Loads())
	}
	advance(DefaultInventoryMinAge)
	for i := 0; i < 1000; i++ {
		inv.Missed()
	}
	waitFor(t, "the second read", func() bool { return inv.Loads() == 2 && !inv.loading.Load() })
	if n, ok := inv.Lookup("52:54:00:00:00:02"); !ok || n != "N2" {
		t.Fatalf("node added to the source: %q %v", n, ok)
	}
	if inv.Len() != 2 {
		t.Errorf("%d MACs held after a flood of 11,000 others, want the inventory's 2", inv.Len())
	}
	// A failing source keeps the copy.
	mu.Lock()
	fail = errors.New("database gone")
	mu.Unlock()
	advance(DefaultInventoryMaxAge)
	inv.Lookup("52:54:00:00:00:01") // old copy: read again
	waitFor(t, "the failed read", func() bool { return inv.Loads() == 3 && !inv.loading.Load() })
	if _, ok := inv.Lookup("52:54:00:00:00:01"); !ok {
		t.Error("a failed read dropped the copy")
	}
	if _, err := NewMACInventory(context.Background(), load, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "database gone") {
		t.Errorf("a failed first read: %v", err)
	}
}

// A flood of DISCOVERs from MACs outside the inventory spends none of the
// inventory nodes' budget: with that budget at 3 requests, after 400
// strangers the known node is still answered, and the log holds a summary,
// not a line per stranger.
func TestProxyDHCPUnknownMACsSpareKnownBudget(t *testing.T) {
	for _, answerUnknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("answer-unknown=%v", answerUnknown), func(t *testing.T) {
			inv := inventoryOf(testMAC.String())
			p, logs := startProxy(t, Config{Inventory: inv, AnswerUnknown: answerUnknown, Rate: 0.001, Burst: 3})
			dhcpAddr, _ := p.Addrs()
			flood := newClient(t)
			for i := 0; i < 400; i++ {
				flood.send(dhcpAddr, ovmfDiscover(t, dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)})))
				if i%20 == 19 {
					waitStats(t, p, func(s Stats) bool { return s.Received == uint64(i+1) })
				}
			}
			s := p.Stats()
			if answerUnknown && (s.Answered != 3 || s.Dropped != 397) {
				t.Errorf("%+v: want 3 strangers answered (their own budget), 397 dropped", s)
			}
			if !answerUnknown && (s.Answered != 0 || s.Ignored+s.Dropped != 400) {
				t.Errorf("%+v: want none answered", s)
			}
			inv.mu.Lock()
			missed := inv.missed
			inv.mu.Unlock()
			if missed == 0 || missed > 400 {
				t.Errorf("inventory told of %d misses", missed)
			}
			c := newClient(t)
			for i := 0; i < 3; i++ {
				d := ovmfDiscover(t)
				c.send(dhcpAddr, d)
				if r := c.recv(); r.TransactionID != d.TransactionID || r.BootFileName != "snponly.efi" {
					t.Fatalf("known node's DISCOVER %d: reply xid %v file %q", i, r.TransactionID, r.BootFileName)
				}
			}
			out := logs.String()
			if n := strings.Count(out, "\n"); n > 20 {
				t.Errorf("400 strangers wrote %d log lines, want a summary:\n%s", n, out)
			}
			if !strings.Contains(out, `msg="proxy DHCP: answered" node=node1`) {
				t.Errorf("the known node's answer is not logged:\n%s", out)
			}
		})
	}
}
