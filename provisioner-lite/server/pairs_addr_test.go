package server_test

import (
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestPairAddressMustBeOwn (the server's half; the pipeline's judges a
// refused offer, provisioner-lite/pipeline): a runner's node-pair offer
// may name only the address its session comes from or one its boot's
// inventory lists on the session's network. Any other (not listed, on
// another network, the unspecified address) is refused: a security event
// naming it, and the stored offer carries the refusal, so the pipeline
// makes the check the node's own ERROR. A runner cannot set the refusal
// itself, and the session goes on.
func TestPairAddressMustBeOwn(t *testing.T) {
	h := newHostile(t)
	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{
		{Name: "eth0", PciAddress: "0000:00:03.0", Addresses: []string{"127.0.0.1/8", "127.0.0.9/8"}},
		{Name: "eth1", PciAddress: "0000:00:04.0", Addresses: []string{"10.9.0.5/24"}},
	}}
	s, cancel := h.session(helloOpts{token: h.fetchToken(nodeA.mac), boot: "b1", node: nodeA, inv: inv})
	defer cancel()
	for i, tc := range []struct {
		addr, runnerRefused, refused string
	}{
		{addr: "127.0.0.1"},                     // the session's own
		{addr: "127.0.0.9"},                     // listed, on the session's network
		{addr: "127.0.0.1", runnerRefused: "x"}, // a runner's "refused" is not kept
		{addr: "127.0.0.10", refused: `port "eth0" address 127.0.0.10 is not the session's address 127.0.0.1 and the boot's inventory does not list it`},
		{addr: "10.9.0.5", refused: `port "eth0" address 10.9.0.5 is outside the session's network 127.0.0.0/8`},
		{addr: "0.0.0.0", refused: `port "eth0" address 0.0.0.0 is not one host's address`},
	} {
		ev := &curev1.Event{Seq: uint64(10 + i), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{
			Check: "pairs", Refused: tc.runnerRefused, Ports: []*curev1.PairPort{{Name: "eth0", Address: tc.addr, Transport: "ethernet"}}}}}
		if err := send(s, ev); err != nil {
			t.Fatalf("%s: the session did not go on: %v", tc.addr, err)
		}
		evs := h.runnerEvents(nodeA.run)
		last := evs[len(evs)-1]
		var back curev1.Event
		if err := protojson.Unmarshal(last.Payload, &back); err != nil || back.GetPairReady() == nil {
			t.Fatalf("%s: stored payload %s: %v", tc.addr, last.Payload, err)
		}
		got := back.GetPairReady().GetRefused()
		switch {
		case tc.refused == "" && got != "":
			t.Errorf("%s: refused: %s", tc.addr, got)
		case tc.refused != "" && !strings.Contains(got, tc.refused):
			t.Errorf("%s: refusal %q, want it to say %q", tc.addr, got, tc.refused)
		case tc.refused != "" && !strings.Contains(last.Message, "refused"):
			t.Errorf("%s: timeline %q does not say it was refused", tc.addr, last.Message)
		}
	}
	// One entry: the audit log folds repeats of one action by one actor
	// from one peer into its next entry.
	sec := h.security(audit.PairAddress)
	if len(sec) != 1 {
		t.Fatalf("security events %+v, want the first refused offer", sec)
	}
	if e := sec[0]; e.Actor != nodeA.id || e.RunID != nodeA.run || e.Peer != "127.0.0.1" || !strings.Contains(e.Detail, "node-pair pairs: offer refused") {
		t.Errorf("security event %+v", e)
	}
}
