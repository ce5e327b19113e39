// Package pairplan is the node-pair network burn-in's pure part: which
// nodes of a burn-in batch meet in which round, who serves and who
// connects, on which ports and in which time window (Plan), and what the
// measured links say about each node (Judge). Rounds follow the circle
// method of a round-robin tournament, so each node meets a different
// partner every round: one slow node shows as every one of its links slow,
// one bad cable or optic as a single slow link between two nodes whose
// other links are fine. It runs nothing; the pipeline keeps the plan in
// the runs' status and sends it, the runners measure.
package pairplan

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Transports a port is measured over.
const (
	Ethernet = "ethernet" // iperf3, TCP
	RDMA     = "rdma"     // perftest ib_write_bw / ib_read_bw
)

// Member is one node of the batch with the ports the SKU has it test, in
// the SKU's order: port i of one node is paired with port i of its
// partner (rail to rail, as rail-optimised fabrics are cabled).
type Member struct {
	Node  string
	Ports []Port
}

// Port is one network port and the node's own address on it.
type Port struct {
	Name      string // eth0, mlx5_0:1
	Address   string // the node's address on the port (IP; for RDMA, the IP its RDMA CM or socket exchange uses)
	Transport string // Ethernet or RDMA
}

// Options shape the plan.
type Options struct {
	// Rounds is how many partners each node meets (default
	// DefaultRounds, at most the batch size less one).
	Rounds int
	// Duration is one direction's transfer; a slot measures both
	// directions, one after the other.
	Duration time.Duration
	// Setup is the time a slot allows before the first transfer (the
	// server started, tools unpacked) and after the last (default
	// DefaultSetup).
	Setup time.Duration
	// BasePort is the first TCP port of a round; port i of a node
	// listens on BasePort+i (default DefaultBasePort).
	BasePort int
}

// Defaults.
const (
	DefaultRounds   = 3
	DefaultSetup    = 5 * time.Second
	DefaultBasePort = 5301
	DefaultDuration = 10 * time.Second
)

// Slot is one link measured in a round: Server listens on its port's
// address, Client connects to it from its own port's address, both
// directions.
type Slot struct {
	Server, Client         string // node ids
	ServerPort, ClientPort string // port names
	ServerAddr, ClientAddr string
	TCPPort                int
	Transport              string
}

// Round is one window of the plan: every slot of a round runs at once.
type Round struct {
	Index int
	// Start is the window's offset from the plan's start; End its end.
	Start, End time.Duration
	Slots      []Slot
	// Idle are the nodes without a partner this round (odd batches).
	Idle []string
}

// Plan is the whole burn-in schedule of a batch.
type Plan struct {
	Rounds []Round
	// Length is when the last window ends, from the plan's start.
	Length time.Duration
	// Notes say what was left out (ports without a partner port).
	Notes []string
}

// Make plans the batch: members sorted by node id, each round a perfect
// matching (one node idle when the batch is odd), no pair twice. It
// refuses a batch of fewer than two nodes, a node twice, a node without
// ports, a port without an address, and ports paired across transports.
func Make(members []Member, o Options) (*Plan, error) {
	if len(members) < 2 {
		return nil, fmt.Errorf("pairplan: a batch of %d node(s) has no pairs: node-pair burn-in needs at least 2", len(members))
	}
	ms, byNode, err := checkMembers(members)
	if err != nil {
		return nil, err
	}
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	// Circle method: seat 0 stays, the others turn one seat a round.
	seats := make([]string, 0, len(ms)+1)
	for _, m := range ms {
		seats = append(seats, m.Node)
	}
	if len(seats)%2 == 1 {
		seats = append(seats, "") // the bye
	}
	n := len(seats)
	rounds := o.Rounds
	if rounds <= 0 {
		rounds = DefaultRounds
	}
	rounds = min(rounds, n-1)
	slot := 2*o.Setup + 2*o.Duration
	p := &Plan{}
	noted := map[string]bool{}
	for r := range rounds {
		order := make([]string, n)
		order[0] = seats[0]
		for i := 1; i < n; i++ {
			order[i] = seats[1+(i-1+r)%(n-1)]
		}
		rd := Round{Index: r, Start: time.Duration(r) * slot, End: time.Duration(r+1) * slot}
		for i := range n / 2 {
			a, b := order[i], order[n-1-i]
			if a == "" || b == "" {
				rd.Idle = append(rd.Idle, a+b)
				continue
			}
			if a > b {
				a, b = b, a
			}
			// Roles alternate by round and table, so every node both
			// serves and connects over its rounds.
			if (r+i)%2 == 1 {
				a, b = b, a
			}
			sm, cm := byNode[a], byNode[b]
			k := min(len(sm.Ports), len(cm.Ports))
			for j := range k {
				sp, cp := sm.Ports[j], cm.Ports[j]
				if sp.Transport != cp.Transport {
					return nil, fmt.Errorf("pairplan: port %d is %s on %s (%s) but %s on %s (%s)", j, sp.Transport, a, sp.Name, cp.Transport, b, cp.Name)
				}
				rd.Slots = append(rd.Slots, Slot{Server: a, Client: b, ServerPort: sp.Name, ClientPort: cp.Name,
					ServerAddr: sp.Address, ClientAddr: cp.Address, TCPPort: o.BasePort + j, Transport: sp.Transport})
			}
			for _, extra := range [][2]Member{{sm, cm}, {cm, sm}} {
				for j := k; j < len(extra[0].Ports); j++ {
					note := fmt.Sprintf("%s port %s has no partner port on %s (%d port(s))", extra[0].Node, extra[0].Ports[j].Name, extra[1].Node, len(extra[1].Ports))
					if !noted[note] {
						noted[note] = true
						p.Notes = append(p.Notes, note)
					}
				}
			}
		}
		slices.Sort(rd.Idle)
		p.Rounds = append(p.Rounds, rd)
		p.Length = rd.End
	}
	return p, nil
}

// checkMembers sorts the batch by node id and checks it: every member a
// node, once, with ports, each with an address and a known transport.
func checkMembers(members []Member) ([]Member, map[string]Member, error) {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	byNode := map[string]Member{}
	for i, m := range ms {
		if m.Node == "" {
			return nil, nil, fmt.Errorf("pairplan: member %d has no node id", i)
		}
		if i > 0 && ms[i-1].Node == m.Node {
			return nil, nil, fmt.Errorf("pairplan: node %s is in the batch twice", m.Node)
		}
		if len(m.Ports) == 0 {
			return nil, nil, fmt.Errorf("pairplan: node %s has no port to test", m.Node)
		}
		for _, p := range m.Ports {
			if p.Address == "" {
				return nil, nil, fmt.Errorf("pairplan: node %s port %s has no address", m.Node, p.Name)
			}
			if p.Transport != Ethernet && p.Transport != RDMA {
				return nil, nil, fmt.Errorf("pairplan: node %s port %s: transport %q (want %s or %s)", m.Node, p.Name, p.Transport, Ethernet, RDMA)
			}
		}
		byNode[m.Node] = m
	}
	return ms, byNode, nil
}

// withDefaults is o with the defaults where it leaves a value unset; a
// base port too high for a node's ports is refused.
func (o Options) withDefaults() (Options, error) {
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Setup <= 0 {
		o.Setup = DefaultSetup
	}
	if o.BasePort <= 0 {
		o.BasePort = DefaultBasePort
	}
	if o.BasePort > 65535-64 {
		return o, fmt.Errorf("pairplan: base port %d leaves no room for a node's ports", o.BasePort)
	}
	return o, nil
}

// Partners lists the nodes each node meets over the plan, in round order.
func (p *Plan) Partners() map[string][]string {
	out := map[string][]string{}
	for _, r := range p.Rounds {
		seen := map[[2]string]bool{}
		for _, s := range r.Slots {
			k := [2]string{s.Server, s.Client}
			if seen[k] {
				continue
			}
			seen[k] = true
			out[s.Server] = append(out[s.Server], s.Client)
			out[s.Client] = append(out[s.Client], s.Server)
		}
	}
	return out
}

// For is the node's part of round r: its slots (as server or client).
func (r Round) For(node string) []Slot {
	var out []Slot
	for _, s := range r.Slots {
		if s.Server == node || s.Client == node {
			out = append(out, s)
		}
	}
	return out
}

// SecretSize is the plan key's and a slot secret's length in bytes.
const SecretSize = 32

// SlotSecret is the link's secret for its window: HMAC-SHA256 of the
// plan's key over the round and both ends, so each pair and window has its
// own and one never opens another's test server. Nil for a key that is
// not SecretSize bytes (a plan without a key has no secrets to give).
func SlotSecret(key []byte, round int, s Slot) []byte {
	if len(key) != SecretSize {
		return nil
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "cure-pair-slot-v1\x00%d\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%d\x00%s",
		round, s.Server, s.ServerPort, s.ServerAddr, s.Client, s.ClientPort, s.ClientAddr, s.TCPPort, s.Transport)
	return m.Sum(nil)
}
