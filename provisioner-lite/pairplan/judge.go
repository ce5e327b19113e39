package pairplan

import (
	"fmt"
	"slices"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Metrics of a link verdict, per transport.
const (
	MetricEthernet = "pairThroughputMbps" // iperf3, the worse direction, Mb/s
	MetricRDMA     = "pairRdmaGbps"       // perftest BW average, the worse direction, Gb/s
)

// MetricOf is the metric and unit a transport's links are judged on.
func MetricOf(transport string) (metric, unit string) {
	if transport == RDMA {
		return MetricRDMA, "Gb/s"
	}
	return MetricEthernet, "Mb/s"
}

// Link is one measured slot: both directions in the metric's unit
// (Forward: client to server; Reverse: server to client), or Err when the
// measurement did not happen.
type Link struct {
	Slot
	Round            int
	Forward, Reverse float64
	Err              string
}

// Rate is the link's worse direction.
func (l Link) Rate() float64 { return min(l.Forward, l.Reverse) }

// name is the pair and its ports, ends in node order.
func (l Link) name() string {
	a, b := l.Server+":"+l.ServerPort, l.Client+":"+l.ClientPort
	if b < a {
		a, b = b, a
	}
	return a + "-" + b
}

// Bars are the minimum rates per transport (0: not judged).
type Bars struct {
	EthernetMbps, RDMAGbps float64
}

func (b Bars) of(transport string) float64 {
	if transport == RDMA {
		return b.RDMAGbps
	}
	return b.EthernetMbps
}

// port is one node's port.
type port struct{ node, name string }

// Judge turns the batch's measured links into each node's verdicts, keyed
// by node id, for the check named check:
//
//   - a port whose every link (two or more, from different partners) was
//     measured and is under its bar is the node's fault: nic/<port> FAIL
//     on that node, naming each partner and rate; its links FAIL on it
//     too, and on its partners they are SKIP, explained by it;
//   - a port whose every measured link is slow but with a link that was
//     not measured is undecided: an errored link is evidence too (any of
//     its partners may be the good end), so the port is nic/<port> ERROR,
//     and its slow links are ERROR on both ends: doubt, never blame
//     shifted onto a partner (FAIL) nor waved off (SKIP);
//   - a slow link between two ports that each have a good link elsewhere
//     (or too few links to tell) names the pair and both ports: a FAIL
//     pair/<a>:<port>-<b>:<port> on both nodes;
//   - a link that was not measured is an ERROR on both ends, saying why;
//   - the rest PASS, with both directions as measurements.
func Judge(check string, links []Link, bars Bars) map[string][]*curev1.Verdict {
	byPort := map[port][]Link{}
	for _, l := range links {
		byPort[port{l.Server, l.ServerPort}] = append(byPort[port{l.Server, l.ServerPort}], l)
		byPort[port{l.Client, l.ClientPort}] = append(byPort[port{l.Client, l.ClientPort}], l)
	}
	slow := func(l Link) bool { bar := bars.of(l.Transport); return l.Err == "" && bar > 0 && l.Rate() < bar }
	ports := make([]port, 0, len(byPort))
	state := map[port]portState{}
	for p, ls := range byPort {
		ports = append(ports, p)
		state[p] = judgePort(p, ls, slow)
	}
	slices.SortFunc(ports, func(a, b port) int { return strings.Compare(a.node+"\x00"+a.name, b.node+"\x00"+b.name) })
	out := map[string][]*curev1.Verdict{}
	add := func(node string, v *curev1.Verdict) { v.Check = check; out[node] = append(out[node], v) }
	for _, p := range ports {
		if v := portVerdict(p, byPort[p], state[p], bars); v != nil {
			add(p.node, v)
		}
	}
	sorted := slices.Clone(links)
	slices.SortFunc(sorted, func(a, b Link) int {
		if a.Round != b.Round {
			return a.Round - b.Round
		}
		return strings.Compare(a.name(), b.name())
	})
	bad := func(p port) bool { return state[p] == portBad }
	undecided := func(p port) bool { return state[p] == portUndecided }
	for _, l := range sorted {
		metric, unit := MetricOf(l.Transport)
		bar := bars.of(l.Transport)
		comp := "pair/" + l.name()
		ends := []port{{l.Server, l.ServerPort}, {l.Client, l.ClientPort}}
		base := func() *curev1.Verdict {
			v := &curev1.Verdict{Component: comp}
			if l.Err == "" {
				v.Observed = fmt.Sprintf("%s=%s (%s->%s %s, %s->%s %s %s)", metric, num(l.Rate()), l.Client, l.Server, num(l.Forward),
					l.Server, l.Client, num(l.Reverse), unit)
				v.Measurements = []*curev1.Measurement{{Metric: metric, Value: l.Rate(), Unit: unit},
					{Metric: metric + "Forward", Value: l.Forward, Unit: unit}, {Metric: metric + "Reverse", Value: l.Reverse, Unit: unit}}
			}
			if bar > 0 {
				v.Expected = fmt.Sprintf("%s>=%s", metric, num(bar))
			}
			return v
		}
		for _, e := range ends {
			v := base()
			o, _ := otherPort(l, e.node)
			oe := port{o, ""}
			for _, x := range ends {
				if x.node == o {
					oe = x
				}
			}
			switch {
			case l.Err != "":
				v.Status = curev1.VerdictStatus_ERROR
				v.Message = fmt.Sprintf("round %d: link %s not measured: %s", l.Round, l.name(), l.Err)
			case !slow(l):
				v.Status = curev1.VerdictStatus_PASS
				v.Message = fmt.Sprintf("round %d", l.Round)
			case bad(e):
				v.Status = curev1.VerdictStatus_FAIL
				v.Message = fmt.Sprintf("round %d: slow, as every link of this node's port %s (nic/%s)", l.Round, e.name, e.name)
			case bad(oe):
				v.Status = curev1.VerdictStatus_SKIP
				v.Message = fmt.Sprintf("round %d: slow, explained by %s: every link of its port %s is slow; this node's other links are fine", l.Round, oe.node, oe.name)
			case undecided(e) || undecided(oe):
				u := e
				if !undecided(e) {
					u = oe
				}
				v.Status = curev1.VerdictStatus_ERROR
				v.Message = fmt.Sprintf("round %d: slow, and whose fault cannot be told: every measured link of %s port %s is slow but some of its links were not measured", l.Round, u.node, u.name)
			default:
				v.Status = curev1.VerdictStatus_FAIL
				v.Message = fmt.Sprintf("round %d: the link between %s port %s and %s port %s is slow while both ports are fine elsewhere (or have no other link to tell by): the pair and its cabling (cable, optics, switch ports) are suspect",
					l.Round, l.Server, l.ServerPort, l.Client, l.ClientPort)
			}
			add(e.node, v)
		}
	}
	return out
}

// portState is what a port's links say about the port.
type portState int

const (
	portFine      portState = iota // a measured link under its bar, or too few partners to tell
	portBad                        // every link measured and slow, two partners or more
	portUndecided                  // every measured link slow, but a link not measured
)

// judgePort reads a port's links: an errored link keeps the port from
// being found bad (its partner may be the good end) and makes it
// undecided when every measured link is slow.
func judgePort(p port, ls []Link, slow func(Link) bool) portState {
	partners := map[string]bool{}
	errored, measured := 0, 0
	for _, l := range ls {
		if l.Err != "" {
			errored++
			continue
		}
		measured++
		if !slow(l) {
			return portFine
		}
		partners[other(l, p.node)] = true
	}
	switch {
	case measured == 0:
		return portFine // nothing measured: its links' ERRORs say so
	case errored > 0:
		return portUndecided
	case len(partners) >= 2:
		return portBad
	}
	return portFine
}

// portVerdict is the nic/<port> verdict of a bad or undecided port (nil
// for a fine one).
func portVerdict(p port, ls []Link, st portState, bars Bars) *curev1.Verdict {
	if st == portFine {
		return nil
	}
	metric, unit := MetricOf(ls[0].Transport)
	var seen, missing []string
	worst := -1.0
	for _, l := range ls {
		o, op := otherPort(l, p.node)
		if l.Err != "" {
			missing = append(missing, fmt.Sprintf("%s:%s (round %d)", o, op, l.Round))
			continue
		}
		seen = append(seen, fmt.Sprintf("%s %s to %s:%s", num(l.Rate()), unit, o, op))
		if worst < 0 || l.Rate() < worst {
			worst = l.Rate()
		}
	}
	bar := bars.of(ls[0].Transport)
	v := &curev1.Verdict{Component: "nic/" + p.name, Status: curev1.VerdictStatus_FAIL,
		Observed: fmt.Sprintf("%s=%s", metric, num(worst)), Expected: fmt.Sprintf("%s>=%s", metric, num(bar)),
		Message: fmt.Sprintf("every link of %s port %s is slow (%d partners): %s; the node's port, not a cable, is the common end",
			p.node, p.name, len(seen), strings.Join(seen, ", ")),
		Measurements: []*curev1.Measurement{{Metric: metric, Value: worst, Unit: unit}}}
	if st == portUndecided {
		v.Status = curev1.VerdictStatus_ERROR
		v.Measurements = nil
		v.Message = fmt.Sprintf("every measured link of %s port %s is slow (%s) but %d link(s) were not measured (%s): an unmeasured link may be the good one, so neither the port nor its partners are judged",
			p.node, p.name, strings.Join(seen, ", "), len(missing), strings.Join(missing, ", "))
	}
	return v
}

func other(l Link, node string) string {
	o, _ := otherPort(l, node)
	return o
}

func otherPort(l Link, node string) (string, string) {
	if l.Server == node {
		return l.Client, l.ClientPort
	}
	return l.Server, l.ServerPort
}

func num(v float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
