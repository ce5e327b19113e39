package pairplan

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func link(round int, s, c string, fwd, rev float64) Link {
	return Link{Slot: Slot{Server: s, Client: c, ServerPort: "eth0", ClientPort: "eth0", Transport: Ethernet}, Round: round, Forward: fwd, Reverse: rev}
}

// statuses is node -> component -> status.
func statuses(v map[string][]*curev1.Verdict) map[string]map[string]curev1.VerdictStatus {
	out := map[string]map[string]curev1.VerdictStatus{}
	for n, vs := range v {
		out[n] = map[string]curev1.VerdictStatus{}
		for _, x := range vs {
			out[n][x.GetComponent()] = x.GetStatus()
		}
	}
	return out
}

const (
	pass = curev1.VerdictStatus_PASS
	fail = curev1.VerdictStatus_FAIL
	skip = curev1.VerdictStatus_SKIP
	errv = curev1.VerdictStatus_ERROR
)

func TestJudge(t *testing.T) {
	bars := Bars{EthernetMbps: 100, RDMAGbps: 300}
	for _, tc := range []struct {
		name  string
		links []Link
		want  map[string]map[string]curev1.VerdictStatus
		// text each named verdict's message must hold
		msg map[string]string
	}{
		{
			name:  "all fast",
			links: []Link{link(0, "a", "b", 900, 910), link(1, "a", "c", 900, 880), link(2, "c", "b", 870, 900)},
			want: map[string]map[string]curev1.VerdictStatus{
				"a": {"pair/a:eth0-b:eth0": pass, "pair/a:eth0-c:eth0": pass},
				"b": {"pair/a:eth0-b:eth0": pass, "pair/b:eth0-c:eth0": pass},
				"c": {"pair/a:eth0-c:eth0": pass, "pair/b:eth0-c:eth0": pass},
			},
		},
		{
			name: "one bad node: every link of c slow in one direction",
			links: []Link{link(0, "a", "b", 900, 910), link(1, "c", "a", 40, 900),
				link(2, "b", "c", 900, 45)},
			want: map[string]map[string]curev1.VerdictStatus{
				"a": {"pair/a:eth0-b:eth0": pass, "pair/a:eth0-c:eth0": skip},
				"b": {"pair/a:eth0-b:eth0": pass, "pair/b:eth0-c:eth0": skip},
				"c": {"nic/eth0": fail, "pair/a:eth0-c:eth0": fail, "pair/b:eth0-c:eth0": fail},
			},
			msg: map[string]string{"c nic/eth0": "every link of c port eth0 is slow (2 partners): 40 Mb/s to a:eth0, 45 Mb/s to b:eth0",
				"a pair/a:eth0-c:eth0": "explained by c"},
		},
		{
			name: "one bad link among four nodes",
			links: []Link{link(0, "a", "b", 30, 900), link(0, "c", "d", 900, 900),
				link(1, "a", "c", 900, 900), link(1, "b", "d", 900, 900),
				link(2, "a", "d", 900, 900), link(2, "b", "c", 900, 900)},
			want: map[string]map[string]curev1.VerdictStatus{
				"a": {"pair/a:eth0-b:eth0": fail, "pair/a:eth0-c:eth0": pass, "pair/a:eth0-d:eth0": pass},
				"b": {"pair/a:eth0-b:eth0": fail, "pair/b:eth0-d:eth0": pass, "pair/b:eth0-c:eth0": pass},
				"c": {"pair/c:eth0-d:eth0": pass, "pair/a:eth0-c:eth0": pass, "pair/b:eth0-c:eth0": pass},
				"d": {"pair/c:eth0-d:eth0": pass, "pair/b:eth0-d:eth0": pass, "pair/a:eth0-d:eth0": pass},
			},
			msg: map[string]string{"a pair/a:eth0-b:eth0": "the link between a port eth0 and b port eth0 is slow while both ports are fine elsewhere"},
		},
		{
			name:  "two nodes: a slow link cannot be pinned on either",
			links: []Link{link(0, "a", "b", 30, 30)},
			want:  map[string]map[string]curev1.VerdictStatus{"a": {"pair/a:eth0-b:eth0": fail}, "b": {"pair/a:eth0-b:eth0": fail}},
		},
		{
			name: "a link not measured is an error, and the slow link of its port is doubt, not a fault of either end",
			links: []Link{{Slot: Slot{Server: "a", Client: "c", ServerPort: "eth0", ClientPort: "eth0", Transport: Ethernet}, Err: "iperf3: unable to connect"},
				link(1, "b", "c", 30, 30), link(2, "a", "b", 900, 900)},
			want: map[string]map[string]curev1.VerdictStatus{
				"a": {"pair/a:eth0-c:eth0": errv, "pair/a:eth0-b:eth0": pass},
				"b": {"pair/b:eth0-c:eth0": errv, "pair/a:eth0-b:eth0": pass},
				"c": {"nic/eth0": errv, "pair/a:eth0-c:eth0": errv, "pair/b:eth0-c:eth0": errv},
			},
			msg: map[string]string{"c pair/a:eth0-c:eth0": "not measured: iperf3: unable to connect",
				"c nic/eth0":           "every measured link of c port eth0 is slow (30 Mb/s to b:eth0) but 1 link(s) were not measured (a:eth0 (round 0))",
				"b pair/b:eth0-c:eth0": "whose fault cannot be told: every measured link of c port eth0 is slow"},
		},
		{
			// Two impostors report g's links to them slow and g's link to
			// the good h errored (its server held, say): dropping the
			// errored link would leave "every link slow" and FAIL g's port.
			name: "an errored link cannot shift blame onto a good node",
			links: []Link{link(0, "g", "i1", 20, 20), link(1, "i2", "g", 20, 20),
				{Slot: Slot{Server: "h", Client: "g", ServerPort: "eth0", ClientPort: "eth0", Transport: Ethernet}, Round: 2, Err: "window ended: connection refused"},
				link(0, "h", "i2", 900, 900), link(1, "i1", "h", 900, 900)},
			want: map[string]map[string]curev1.VerdictStatus{
				"g":  {"nic/eth0": errv, "pair/g:eth0-i1:eth0": errv, "pair/g:eth0-i2:eth0": errv, "pair/g:eth0-h:eth0": errv},
				"h":  {"pair/g:eth0-h:eth0": errv, "pair/h:eth0-i2:eth0": pass, "pair/h:eth0-i1:eth0": pass},
				"i1": {"pair/g:eth0-i1:eth0": errv, "pair/h:eth0-i1:eth0": pass},
				"i2": {"pair/g:eth0-i2:eth0": errv, "pair/h:eth0-i2:eth0": pass},
			},
			msg: map[string]string{"g nic/eth0": "neither the port nor its partners are judged"},
		},
		{
			name: "a slow node whose one link errored is not cleared: its partners' slow links are ERROR, not SKIP",
			links: []Link{link(0, "x", "a", 20, 20), link(1, "b", "x", 20, 20),
				{Slot: Slot{Server: "x", Client: "c", ServerPort: "eth0", ClientPort: "eth0", Transport: Ethernet}, Round: 2, Err: "timeout"},
				link(0, "b", "c", 900, 900), link(1, "c", "a", 900, 900), link(2, "a", "b", 900, 900)},
			want: map[string]map[string]curev1.VerdictStatus{
				"x": {"nic/eth0": errv, "pair/a:eth0-x:eth0": errv, "pair/b:eth0-x:eth0": errv, "pair/c:eth0-x:eth0": errv},
				"a": {"pair/a:eth0-x:eth0": errv, "pair/a:eth0-c:eth0": pass, "pair/a:eth0-b:eth0": pass},
				"b": {"pair/b:eth0-x:eth0": errv, "pair/b:eth0-c:eth0": pass, "pair/a:eth0-b:eth0": pass},
				"c": {"pair/c:eth0-x:eth0": errv, "pair/b:eth0-c:eth0": pass, "pair/a:eth0-c:eth0": pass},
			},
		},
		{
			name: "rdma bars apply to rdma links",
			links: []Link{{Slot: Slot{Server: "a", Client: "b", ServerPort: "mlx5_0:1", ClientPort: "mlx5_0:1", Transport: RDMA}, Forward: 290, Reverse: 380},
				{Slot: Slot{Server: "a", Client: "b", ServerPort: "mlx5_1:1", ClientPort: "mlx5_1:1", Transport: RDMA}, Forward: 370, Reverse: 380}},
			want: map[string]map[string]curev1.VerdictStatus{
				"a": {"pair/a:mlx5_0:1-b:mlx5_0:1": fail, "pair/a:mlx5_1:1-b:mlx5_1:1": pass},
				"b": {"pair/a:mlx5_0:1-b:mlx5_0:1": fail, "pair/a:mlx5_1:1-b:mlx5_1:1": pass},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Judge("pairs", tc.links, bars)
			gs := statuses(got)
			for node, comps := range tc.want {
				for comp, st := range comps {
					if gs[node][comp] != st {
						t.Errorf("%s %s = %s, want %s", node, comp, gs[node][comp], st)
					}
				}
				if len(gs[node]) != len(comps) {
					t.Errorf("%s: verdicts %v, want %v", node, gs[node], comps)
				}
			}
			for key, want := range tc.msg {
				node, comp, _ := strings.Cut(key, " ")
				found := false
				for _, v := range got[node] {
					if v.GetComponent() == comp {
						found = true
						if !strings.Contains(v.GetMessage(), want) {
							t.Errorf("%s: message %q lacks %q", key, v.GetMessage(), want)
						}
						if v.GetCheck() != "pairs" {
							t.Errorf("%s: check %q", key, v.GetCheck())
						}
					}
				}
				if !found {
					t.Errorf("no verdict %s", key)
				}
			}
		})
	}
}
