package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// stdinIsTerminal is the seam the wipe confirmation asks: tests stand a pipe
// in for a terminal.
var stdinIsTerminal = func(in io.Reader) bool { return isTerminal(in) }

// destructive reports whether a mode's purpose is to destroy data. Provision
// also installs an OS over a disk, but that is what it is run for; wipe
// leaves nothing behind, so it is the one that asks.
func destructive(m modes.Mode) bool { return m == modes.Wipe }

// wipeTargets resolves ids and a selector to the nodes' details, in the
// order the coordinator uses (ids first, then the selector's matches by id).
// The wipe then names exactly these ids, never the selector again, so a
// label changed between the question and the answer widens nothing.
func wipeTargets(ctx context.Context, c curev1.OperatorServiceClient, ids []string, sel map[string]string) ([]*curev1.NodeDetail, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	want := slices.Clone(ids)
	if len(sel) > 0 {
		resp, err := c.ListNodes(cctx, &curev1.ListNodesRequest{})
		if err != nil {
			return nil, fmt.Errorf("list nodes for --selector: %w", err)
		}
		for _, n := range resp.GetNodes() {
			want = append(want, n.GetNodeId())
		}
	}
	var out []*curev1.NodeDetail
	seen := map[string]bool{}
	for i, id := range want {
		if seen[id] {
			continue
		}
		d, err := c.ShowNode(cctx, &curev1.ShowNodeRequest{NodeId: id})
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", id, err)
		}
		if i >= len(ids) && !selectorMatches(d, sel) {
			continue
		}
		seen[id] = true
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("selector %s matches no node", selectorString(sel))
	}
	return out, nil
}

// selectorMatches is the coordinator's rule: every pair matches a label;
// "sku" matches the node's SKU when it has no label of that name.
func selectorMatches(d *curev1.NodeDetail, sel map[string]string) bool {
	for k, v := range sel {
		got, ok := d.GetLabels()[k]
		if !ok && k == "sku" {
			got, ok = d.GetSku(), true
		}
		if !ok || got != v {
			return false
		}
	}
	return true
}

func selectorString(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range sel {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

// wipeSummary says which nodes and which disks a wipe destroys: the disks
// each node reported when it last booted CURE (its boot medium excepted),
// or that none are known yet.
func wipeSummary(nodes []*curev1.NodeDetail) string {
	return eraseSummary(fmt.Sprintf("mode wipe destroys the data on every disk of %d node(s) (SED revert, then power off):\n", len(nodes)), nodes)
}

// deployedSummary says which deployed nodes (in the day-2 pool) a
// provision takes from their tenants, with their pool state and disks.
func deployedSummary(nodes []*curev1.NodeDetail) string {
	return eraseSummary(fmt.Sprintf("mode provision erases %d node(s) in the pool (SED revert, then a new OS over the disks); the scheduler loses them:\n", len(nodes)), nodes)
}

func eraseSummary(head string, nodes []*curev1.NodeDetail) string {
	var b strings.Builder
	b.WriteString(head)
	for _, d := range nodes {
		fmt.Fprintf(&b, "  node %s  sku %s  serial %s", textsafe.Line(d.GetNodeId()), orDash(d.GetSku()), orDash(d.GetSerial()))
		if st := d.GetPool().GetState(); st != curev1.PoolState_POOL_STATE_UNSPECIFIED {
			fmt.Fprintf(&b, "  pool %s", render.PoolName(st))
		}
		b.WriteString("\n")
		rec := d.GetInventory()
		if rec == nil {
			b.WriteString("    disks: not inventoried yet: every disk the runner finds on the node\n")
			continue
		}
		n := 0
		for _, k := range rec.GetInventory().GetDisks() {
			if k.GetBootMedium() || k.GetRemovable() {
				continue
			}
			n++
			fmt.Fprintf(&b, "    disk %s  %s  serial %s  %s  %s\n", textsafe.Line(k.GetName()), orDash(k.GetModel()), orDash(k.GetSerial()),
				humanBytes(k.GetSizeBytes()), orDash(k.GetTransport()))
		}
		if n == 0 {
			b.WriteString("    disks: none reported at the last inventory (any disk found at boot is wiped)\n")
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return textsafe.Line(s)
}

func humanBytes(n uint64) string {
	const unit = 1000
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// errNotConfirmed is a refusal: nothing was started.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks on a terminal for the node count or "yes" before verb
// (wipe, provision) is done to them; anywhere else it refuses (a script
// says --yes).
func confirm(verb, summary string, count int, yes bool, in io.Reader, tty bool, prompt io.Writer) error {
	fmt.Fprint(prompt, summary)
	if yes {
		return nil
	}
	if !tty {
		return fmt.Errorf("%w: stdin is not a terminal; to %s without a question, give --yes", errNotConfirmed, verb)
	}
	fmt.Fprintf(prompt, "type %d (the number of nodes) or yes to %s them: ", count, verb)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: reading the answer: %v", errNotConfirmed, err)
	}
	switch ans := strings.TrimSpace(line); ans {
	case "yes", strconv.Itoa(count):
		return nil
	default:
		return fmt.Errorf("%w: answer %q is neither yes nor %d", errNotConfirmed, textsafe.Line(ans), count)
	}
}

// confirmWipe resolves and lists the targets, asks, and on yes narrows the
// request to exactly the listed ids, each confirmed (the coordinator wipes
// a node in the pool only when its id is confirmed). 0 means go on.
func confirmWipe(ctx context.Context, c curev1.OperatorServiceClient, ids *[]string, sel *map[string]string, confirmed *[]string, yes bool, in io.Reader, prompt io.Writer) int {
	targets, err := wipeTargets(ctx, c, *ids, *sel)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl provision --mode wipe: nothing was started:", err)
		return 1
	}
	if err := confirm("wipe", wipeSummary(targets), len(targets), yes, in, stdinIsTerminal(in), prompt); err != nil {
		fmt.Fprintln(stderr(), "curectl provision --mode wipe: nothing was started:", err)
		return 2
	}
	resolved := make([]string, len(targets))
	for i, d := range targets {
		resolved[i] = d.GetNodeId()
	}
	*ids, *sel, *confirmed = resolved, nil, resolved
	return 0
}

// confirmDeployed finds the targets of a provision that are in the day-2
// pool (deployed: the coordinator needs admin and their ids confirmed),
// lists them with their disks and asks; the others are provisioned
// without a question, as before. 0 means go on. A label changed after the
// question cannot add an unconfirmed deployed node: the coordinator
// refuses the whole request.
func confirmDeployed(ctx context.Context, c curev1.OperatorServiceClient, ids []string, sel map[string]string, confirmed *[]string, yes bool, in io.Reader, prompt io.Writer) int {
	targets, err := deployedTargets(ctx, c, ids, sel)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl provision: nothing was started:", err)
		return 1
	}
	if len(targets) == 0 {
		return 0
	}
	if err := confirm("provision", deployedSummary(targets), len(targets), yes, in, stdinIsTerminal(in), prompt); err != nil {
		fmt.Fprintln(stderr(), "curectl provision: nothing was started:", err)
		return 2
	}
	for _, d := range targets {
		*confirmed = append(*confirmed, d.GetNodeId())
	}
	return 0
}

// deployedTargets is the nodes among ids and the selector's matches that
// are in the pool. One ListNodes says which are; only those are read
// whole (a selector over new racks costs no ShowNode per node).
func deployedTargets(ctx context.Context, c curev1.OperatorServiceClient, ids []string, sel map[string]string) ([]*curev1.NodeDetail, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.ListNodes(cctx, &curev1.ListNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list nodes for their pool states: %w", err)
	}
	named := map[string]bool{}
	for _, id := range ids {
		named[id] = true
	}
	var out []*curev1.NodeDetail
	for _, n := range resp.GetNodes() {
		if n.GetPoolState() == curev1.PoolState_POOL_STATE_UNSPECIFIED || (!named[n.GetNodeId()] && len(sel) == 0) {
			continue
		}
		d, err := c.ShowNode(cctx, &curev1.ShowNodeRequest{NodeId: n.GetNodeId()})
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.GetNodeId(), err)
		}
		if named[n.GetNodeId()] || selectorMatches(d, sel) {
			out = append(out, d)
		}
	}
	return out, nil
}
