package pairplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func eth(nodes ...string) []Member {
	var ms []Member
	for i, n := range nodes {
		ms = append(ms, Member{Node: n, Ports: []Port{{Name: "eth0", Address: fmt.Sprintf("10.0.0.%d", i+1), Transport: Ethernet}}})
	}
	return ms
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []Member
		o       Options
		rounds  int
		// partners each node meets (all distinct)
		partners int
		idle     int // idle nodes per round
		err      string
	}{
		{name: "two nodes: one round", members: eth("a", "b"), rounds: 1, partners: 1},
		{name: "three nodes: all pairs, one idle a round", members: eth("c", "a", "b"), rounds: 3, partners: 2, idle: 1},
		{name: "four nodes: three rounds", members: eth("a", "b", "c", "d"), rounds: 3, partners: 3},
		{name: "eight nodes: default three partners", members: eth("a", "b", "c", "d", "e", "f", "g", "h"), rounds: 3, partners: 3},
		{name: "eight nodes: all seven", members: eth("a", "b", "c", "d", "e", "f", "g", "h"), o: Options{Rounds: 20}, rounds: 7, partners: 7},
		{name: "five nodes: two rounds", members: eth("a", "b", "c", "d", "e"), o: Options{Rounds: 2}, rounds: 2, partners: -1, idle: 1},
		{name: "one node", members: eth("a"), err: "a batch of 1 node(s) has no pairs"},
		{name: "twice", members: eth("a", "a"), err: "node a is in the batch twice"},
		{name: "no ports", members: []Member{{Node: "a"}, {Node: "b"}}, err: "node a has no port to test"},
		{name: "no address", members: []Member{{Node: "a", Ports: []Port{{Name: "eth0", Transport: Ethernet}}}, {Node: "b"}}, err: "node a port eth0 has no address"},
		{name: "transport mismatch", members: []Member{{Node: "a", Ports: []Port{{Name: "eth0", Address: "x", Transport: Ethernet}}},
			{Node: "b", Ports: []Port{{Name: "mlx5_0:1", Address: "y", Transport: RDMA}}}}, err: "port 0 is ethernet on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(tc.members, tc.o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rounds) != tc.rounds {
				t.Fatalf("%d rounds, want %d", len(p.Rounds), tc.rounds)
			}
			met := map[[2]string]bool{}
			for _, r := range p.Rounds {
				busy := map[string]bool{}
				for _, s := range r.Slots {
					if busy[s.Server] || busy[s.Client] {
						t.Errorf("round %d: a node in two slots: %+v", r.Index, r.Slots)
					}
					busy[s.Server], busy[s.Client] = true, true
					k := [2]string{min(s.Server, s.Client), max(s.Server, s.Client)}
					if met[k] {
						t.Errorf("round %d: %v meet again", r.Index, k)
					}
					met[k] = true
					if s.TCPPort != DefaultBasePort || s.ServerAddr == "" || s.ClientAddr == "" {
						t.Errorf("slot %+v", s)
					}
				}
				if len(r.Idle) != tc.idle {
					t.Errorf("round %d idle %v, want %d", r.Index, r.Idle, tc.idle)
				}
				if len(busy)+len(r.Idle) != len(tc.members) {
					t.Errorf("round %d: %d busy + %v idle of %d", r.Index, len(busy), r.Idle, len(tc.members))
				}
			}
			if tc.partners >= 0 {
				for node, ps := range p.Partners() {
					if len(ps) != tc.partners {
						t.Errorf("%s meets %v, want %d partners", node, ps, tc.partners)
					}
				}
			}
			// Roles alternate: with two or more rounds, somebody serves in
			// one round and connects in another.
			if tc.rounds >= 2 {
				both := 0
				for _, m := range tc.members {
					var serve, connect bool
					for _, r := range p.Rounds {
						for _, s := range r.For(m.Node) {
							serve = serve || s.Server == m.Node
							connect = connect || s.Client == m.Node
						}
					}
					if serve && connect {
						both++
					}
				}
				if both == 0 {
					t.Error("no node both serves and connects")
				}
			}
		})
	}
}

func TestPlanWindowsAndPorts(t *testing.T) {
	ms := []Member{
		{Node: "n1", Ports: []Port{{"mlx5_0:1", "10.1.0.1", RDMA}, {"mlx5_1:1", "10.2.0.1", RDMA}}},
		{Node: "n2", Ports: []Port{{"mlx5_0:1", "10.1.0.2", RDMA}, {"mlx5_1:1", "10.2.0.2", RDMA}, {"mlx5_2:1", "10.3.0.2", RDMA}}},
	}
	p, err := Make(ms, Options{Duration: 3 * time.Second, Setup: 2 * time.Second, BasePort: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rounds) != 1 || p.Rounds[0].Start != 0 || p.Rounds[0].End != 10*time.Second || p.Length != 10*time.Second {
		t.Fatalf("rounds %+v length %s", p.Rounds, p.Length)
	}
	s := p.Rounds[0].Slots
	if len(s) != 2 || s[0].TCPPort != 6000 || s[1].TCPPort != 6001 || s[1].ServerPort != "mlx5_1:1" || s[1].ClientPort != "mlx5_1:1" {
		t.Fatalf("slots %+v", s)
	}
	if !slices.Equal(p.Notes, []string{"n2 port mlx5_2:1 has no partner port on n1 (2 port(s))"}) {
		t.Errorf("notes %q", p.Notes)
	}
	p3, _ := Make(eth("a", "b", "c"), Options{Duration: time.Second, Setup: time.Second})
	for i, r := range p3.Rounds {
		if r.Start != time.Duration(i)*4*time.Second || r.End-r.Start != 4*time.Second {
			t.Errorf("round %d window %s..%s", i, r.Start, r.End)
		}
	}
}
