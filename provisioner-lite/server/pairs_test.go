package server

import (
	"fmt"
	"math"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestPairEvents: a runner's node-pair offer and result are kept as its
// info entries with the cleaned message as payload (what the pipeline
// acts on); malformed ones are refused, naming what.
func TestPairEvents(t *testing.T) {
	phases := map[modes.PhaseName]bool{"validate": true}
	ready := func(ports ...*curev1.PairPort) *curev1.Event {
		return &curev1.Event{Seq: 5, Phase: "validate", Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs", Ports: ports}}}
	}
	e, v, err := runnerEvent("n1", "r1", "b", ready(&curev1.PairPort{Name: "eth0\x1b[2J", Address: "10.78.0.11", Transport: "ethernet"}), phases)
	if err != nil || v != nil {
		t.Fatal(err)
	}
	if e.Kind != runstate.EventInfo || !strings.Contains(e.Message, "node-pair pairs: ports offered: eth0") || strings.Contains(e.Message, "\x1b") {
		t.Errorf("event %+v", e)
	}
	var back curev1.Event
	if err := protojson.Unmarshal(e.Payload, &back); err != nil || back.GetPairReady().GetPorts()[0].GetAddress() != "10.78.0.11" {
		t.Errorf("payload %s: %v", e.Payload, err)
	}
	res := func(r *curev1.PairResult) *curev1.Event {
		return &curev1.Event{Seq: 6, Phase: "validate", Body: &curev1.Event_PairResult{PairResult: r}}
	}
	e, _, err = runnerEvent("n1", "r1", "b", res(&curev1.PairResult{Check: "pairs", Round: 2, Partner: "n3", Port: "eth0", PartnerPort: "eth0",
		Transport: "ethernet", Forward: 90.2, Reverse: 7.5, Unit: "Mb/s"}), phases)
	if err != nil || !strings.Contains(e.Message, "round 2: eth0 to n3:eth0: forward 90.2 Mb/s, reverse 7.5 Mb/s") {
		t.Errorf("result %+v %v", e, err)
	}
	for name, ev := range map[string]*curev1.Event{
		"no ports":          ready(),
		"not an address":    ready(&curev1.PairPort{Name: "eth0", Address: "eth0", Transport: "ethernet"}),
		"transport":         ready(&curev1.PairPort{Name: "eth0", Address: "10.0.0.1", Transport: "smoke"}),
		"negative rate":     res(&curev1.PairResult{Check: "pairs", Partner: "n3", Transport: "ethernet", Forward: -1}),
		"NaN rate":          res(&curev1.PairResult{Check: "pairs", Partner: "n3", Transport: "rdma", Reverse: math.NaN()}),
		"no partner":        res(&curev1.PairResult{Check: "pairs", Transport: "ethernet"}),
		"not a run's phase": {Seq: 7, Phase: "os_install", Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs"}}},
	} {
		if _, _, err := runnerEvent("n1", "r1", "b", ev, phases); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPairAddressRule: without an inventory listing the session's
// address with its network, only the session's address is the node's;
// an inventory address without a prefix says nothing of its network.
func TestPairAddressRule(t *testing.T) {
	ports := func(a ...string) []*curev1.PairPort {
		var out []*curev1.PairPort
		for i, x := range a {
			out = append(out, &curev1.PairPort{Name: fmt.Sprintf("eth%d", i), Address: x})
		}
		return out
	}
	noPrefix := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "eth0", Addresses: []string{"10.0.0.5", "10.0.0.6"}}}}
	withPrefix := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "eth0", Addresses: []string{"10.0.0.5/24", "10.0.0.6/24"}}, {Name: "eth1", Addresses: []string{"10.1.0.5/24"}}}}
	for _, tc := range []struct {
		name string
		inv  *curev1.Inventory
		addr []string
		want string // "" : accepted
	}{
		{"session address, no inventory", nil, []string{"10.0.0.5"}, ""},
		{"another address, no inventory", nil, []string{"10.0.0.6"}, "the boot's inventory does not list 10.0.0.5 with its network"},
		{"listed without a prefix", noPrefix, []string{"10.0.0.6"}, "does not list 10.0.0.5 with its network"},
		{"listed on the session's network", withPrefix, []string{"10.0.0.5", "10.0.0.6"}, ""},
		{"the coordinator on the same network", withPrefix, []string{"10.0.0.1"}, `port "eth0" address 10.0.0.1 is not the session's address`},
		{"a listed rail on another network", withPrefix, []string{"10.0.0.5", "10.1.0.5"}, `port "eth1" address 10.1.0.5 is outside the session's network 10.0.0.0/24`},
		{"IPv4 in IPv6 form is the same address", nil, []string{"::ffff:10.0.0.5"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pairAddressProblem(ports(tc.addr...), "10.0.0.5", tc.inv)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problem %q, want %q", got, tc.want)
			}
		})
	}
}
