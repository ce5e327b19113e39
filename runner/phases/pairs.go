package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/paircheck"
	"github.com/cure-oss/cure/tools/checks/suite"
)

// pairRunner runs the suite's node-pair checks: it offers the node's
// ports to the coordinator (PairReady), waits for this node's part of the
// batch's plan (PairSchedule), measures its slots in their windows through
// the tool bundle's helper (a server listens on its own address for the
// window; a client measures both directions and reports each link,
// PairResult), then waits for the batch's judgement of this node
// (PairVerdicts), which are the check's verdicts.
type pairRunner struct {
	e       *Executor
	emit    agent.Emitter
	inbox   *agent.PairInbox
	measure func(context.Context, measure.Request) ([]checks.Verdict, error)
	// prepare fetches the tool bundle before the ports are offered, so no
	// window is spent fetching it.
	prepare func(context.Context) error
	nics    []manifests.NICSpec
}

// pairSlack is how long past the plan's end a node waits for the batch's
// judgement (its partners' results travel through the coordinator).
const pairSlack = 2 * time.Minute

func (p *pairRunner) run(ctx context.Context, cfg suite.PairConfig) ([]checks.Verdict, error) {
	if p.inbox == nil {
		return nil, errors.New("node-pair: this runner has no inbox for the coordinator's schedule")
	}
	if p.measure == nil {
		return nil, errors.New("node-pair: the suite's tool bundle is not available")
	}
	if p.e.cfg.Inventory == nil {
		return nil, errors.New("node-pair: this runner cannot list its ports")
	}
	inv, err := p.e.cfg.Inventory(ctx)
	if inv == nil {
		return nil, fmt.Errorf("node-pair: inventory: %w", err)
	}
	ports, err := pairPorts(inv, p.nics, cfg, func(ifname string) string { return rdmaDevice(p.e.cfg.Root, ifname) })
	if err != nil {
		return nil, err
	}
	if p.prepare != nil {
		if err := p.prepare(ctx); err != nil {
			return nil, fmt.Errorf("node-pair %s: %w", cfg.Check, err)
		}
	}
	p.inbox.Forget(cfg.Check)
	var names []string
	for _, pt := range ports {
		names = append(names, pt.GetName()+" "+pt.GetAddress())
	}
	p.emit.PairReady(&curev1.PairReady{Check: cfg.Check, Stage: cfg.Stage, Ports: ports})
	p.emit.Log("INFO", fmt.Sprintf("node-pair %s: ports offered (%s); waiting up to %s for the batch's plan", cfg.Check, strings.Join(names, ", "), cfg.Gather+pairSlack), nil)

	wctx, cancel := context.WithTimeout(ctx, cfg.Gather+pairSlack)
	sched, early, got, err := p.inbox.Next(wctx, cfg.Check)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node-pair %s: the check's time (the suite's duration) ran out waiting for the batch's plan: %v", cfg.Check, context.Cause(ctx))
		}
		return nil, fmt.Errorf("node-pair %s: no plan from the coordinator within %s: %v", cfg.Check, cfg.Gather+pairSlack, err)
	}
	if sched == nil {
		return pairVerdicts(cfg, early)
	}
	// The coordinator's clock placed on this node's: its times are
	// offsets from when it sent the plan.
	local := func(ms int64) time.Time { return got.Add(time.Duration(ms-sched.GetNowUnixMs()) * time.Millisecond) }
	p.emit.Log("INFO", fmt.Sprintf("node-pair %s: batch %s of %d nodes (%s), %d round(s); this node's slots: %d; starts in %s",
		cfg.Check, sched.GetBatch(), len(sched.GetMembers()), strings.Join(sched.GetMembers(), ", "), sched.GetRounds(), len(sched.GetSlots()),
		time.Until(local(sched.GetStartUnixMs())).Round(time.Second)), nil)
	for _, n := range sched.GetNotes() {
		p.emit.Log("WARN", fmt.Sprintf("node-pair %s: %s", cfg.Check, n), nil)
	}
	byRound := map[uint32][]*curev1.PairSlot{}
	var rounds []uint32
	for _, s := range sched.GetSlots() {
		if _, ok := byRound[s.GetRound()]; !ok {
			rounds = append(rounds, s.GetRound())
		}
		byRound[s.GetRound()] = append(byRound[s.GetRound()], s)
	}
	slices.Sort(rounds)
	for _, r := range rounds {
		slots := byRound[r]
		start, end := local(slots[0].GetStartUnixMs()), local(slots[0].GetEndUnixMs())
		if err := sleepUntil(ctx, start); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithDeadline(ctx, end)
		var wg sync.WaitGroup
		for _, s := range slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.slot(rctx, cfg, sched, s)
			}()
		}
		wg.Wait()
		cancel()
	}
	vctx, cancel := context.WithDeadline(ctx, local(sched.GetEndUnixMs()).Add(pairSlack))
	defer cancel()
	pv, _, err := p.inbox.Verdicts(vctx, cfg.Check)
	if err != nil {
		return nil, fmt.Errorf("node-pair %s: no judgement from the coordinator by %s after the plan's end: %v", cfg.Check, pairSlack, err)
	}
	return pairVerdicts(cfg, pv)
}

// pairVerdicts are the batch's judgement of this node as the check's
// verdicts.
func pairVerdicts(cfg suite.PairConfig, pv *curev1.PairVerdicts) ([]checks.Verdict, error) {
	var out []checks.Verdict
	for _, v := range pv.GetVerdicts() {
		cv := checks.Verdict{Component: v.GetComponent(), Check: cfg.Check, Status: checks.Status(v.GetStatus().String()),
			Observed: v.GetObserved(), Expected: v.GetExpected(), Message: v.GetMessage()}
		for _, m := range v.GetMeasurements() {
			cv.Measurements = append(cv.Measurements, checks.Measurement{Metric: m.GetMetric(), Value: m.GetValue(), Unit: m.GetUnit()})
		}
		out = append(out, cv)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("node-pair %s: the coordinator judged no link of this node", cfg.Check)
	}
	return out, nil
}

// slot runs one slot until the round's window ends; a client reports its
// measurement (or why there is none).
func (p *pairRunner) slot(ctx context.Context, cfg suite.PairConfig, sched *curev1.PairSchedule, s *curev1.PairSlot) {
	ps := &paircheck.Slot{Role: s.GetRole(), Transport: s.GetTransport(), Address: s.GetAddress(), PartnerAddress: s.GetPartnerAddress(),
		TCPPort: int(s.GetTcpPort()), Duration: time.Duration(sched.GetDurationMs()) * time.Millisecond, Partner: s.GetPartner()}
	if ps.Transport == paircheck.RDMA {
		ps.Device = rdmaDevice(p.e.cfg.Root, s.GetPort())
	}
	req := measure.Request{Type: manifests.CheckNodePair, Pair: ps}
	if s.GetRole() == paircheck.Server {
		p.serve(ctx, cfg, s, req)
		return
	}
	res := &curev1.PairResult{Check: cfg.Check, Round: s.GetRound(), Partner: s.GetPartner(), Port: s.GetPort(), PartnerPort: s.GetPartnerPort(),
		Transport: s.GetTransport()}
	var gate *clientGate
	if ps.Transport == paircheck.Ethernet {
		// iperf3 reaches the partner through this node's end of the gate
		// (pairs_gate.go): it connects to loopback, the gate carries it.
		g, err := startClientGate(ctx, s.GetAddress(), s.GetPartnerAddress(), int(s.GetTcpPort()), s.GetSecret())
		if err != nil {
			res.Error = err.Error()
			p.emit.PairResult(res)
			return
		}
		gate = g
		ps.Address, ps.PartnerAddress, ps.TCPPort = "127.0.0.1", "127.0.0.1", g.localPort()
	}
	// Give the partner's server a moment to start; the client retries
	// until the window ends anyway.
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	vs, err := p.measure(ctx, req)
	if err == nil && len(vs) != 1 {
		err = fmt.Errorf("the helper returned %d verdicts for one link", len(vs))
	}
	var r paircheck.Result
	if err == nil {
		r, err = paircheck.FromVerdict(vs[0])
	}
	if err != nil {
		res.Error = err.Error()
		if gate != nil {
			if last := gate.refused.lastErr(); last != nil {
				res.Error += "; through the gate to " + s.GetPartnerAddress() + ": " + last.Error()
			}
		}
	} else {
		res.Forward, res.Reverse, res.Unit = r.Forward, r.Reverse, r.Unit
	}
	p.emit.PairResult(res)
}

// serve is a server slot: over Ethernet the tool listens on loopback and
// the gate on the port's own address admits only the partner proving the
// slot's secret; over RDMA perftest listens itself.
func (p *pairRunner) serve(ctx context.Context, cfg suite.PairConfig, s *curev1.PairSlot, req measure.Request) {
	warn := func(err error) {
		p.emit.Log("WARN", fmt.Sprintf("node-pair %s round %d: server for %s on %s: %v", cfg.Check, s.GetRound(), s.GetPartner(), s.GetPort(), err), nil)
	}
	var gate *serverGate
	if req.Pair.Transport == paircheck.Ethernet {
		backend, err := freeLoopbackPort()
		if err != nil {
			warn(err)
			return
		}
		gate, err = startServerGate(ctx, s.GetAddress(), s.GetPartnerAddress(), int(s.GetTcpPort()), s.GetSecret(), net.JoinHostPort("127.0.0.1", strconv.Itoa(backend)))
		if err != nil {
			warn(err)
			return
		}
		req.Pair.Address, req.Pair.TCPPort = "127.0.0.1", backend
	}
	if _, err := p.measure(ctx, req); err != nil && ctx.Err() == nil {
		warn(err)
	}
	if gate != nil {
		if r := gate.refused.summary(); r != "" {
			p.emit.Log("WARN", fmt.Sprintf("node-pair %s round %d: the test server on %s:%d for %s (%s) refused: %s", cfg.Check, s.GetRound(),
				s.GetAddress(), s.GetTcpPort(), s.GetPartner(), s.GetPartnerAddress(), r), nil)
		}
	}
}

// freeLoopbackPort is a TCP port free on loopback now, for the tool
// behind the gate.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a loopback port for the test server: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// pairPorts are the ports a node-pair check tests, in PCI order: the
// interfaces the suite's globs name, else those of the NICs the SKU
// declares (by model glob or PCI id), else every PCI network function;
// each must have an IPv4 address of its own.
func pairPorts(inv *curev1.Inventory, nics []manifests.NICSpec, cfg suite.PairConfig, rdmaDev func(string) string) ([]*curev1.PairPort, error) {
	var cands []*curev1.NetInterface
	for _, n := range inv.GetNics() {
		if n.GetPciAddress() == "" {
			continue // virtual: bridges, bonds, loopback
		}
		switch {
		case len(cfg.Interfaces) > 0:
			if !slices.ContainsFunc(cfg.Interfaces, func(g string) bool { ok, _ := path.Match(g, n.GetName()); return ok }) {
				continue
			}
		case len(nics) > 0:
			// The first SKU entry matching a port owns it, as in the
			// hardware check.
			idx := slices.IndexFunc(nics, func(s manifests.NICSpec) bool { return nicMatches(s, n) })
			if idx < 0 || len(cfg.SKUNICs) > 0 && !slices.Contains(cfg.SKUNICs, idx) {
				continue
			}
		}
		cands = append(cands, n)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].GetPciAddress() < cands[j].GetPciAddress() })
	var out []*curev1.PairPort
	var skipped []string
	for _, n := range cands {
		addr := ipv4Of(n.GetAddresses())
		if addr == "" {
			skipped = append(skipped, n.GetName()+" (no IPv4 address)")
			continue
		}
		pp := &curev1.PairPort{Name: n.GetName(), Address: addr, Transport: cfg.Transport}
		if cfg.Transport == paircheck.RDMA && rdmaDev(n.GetName()) == "" {
			skipped = append(skipped, n.GetName()+" (no RDMA device)")
			continue
		}
		out = append(out, pp)
	}
	if len(out) == 0 {
		how := "every PCI network port"
		switch {
		case len(cfg.Interfaces) > 0:
			how = "interfaces " + strings.Join(cfg.Interfaces, ", ")
		case len(nics) > 0:
			how = "the SKU's NICs"
		}
		return nil, fmt.Errorf("node-pair %s: no port to test among %s (%d candidate(s)%s)", cfg.Check, how, len(cands),
			map[bool]string{true: ": " + strings.Join(skipped, ", "), false: ""}[len(skipped) > 0])
	}
	return out, nil
}

func nicMatches(s manifests.NICSpec, n *curev1.NetInterface) bool {
	if s.Model != "" {
		if ok, _ := path.Match(s.Model, n.GetModel()); !ok {
			return false
		}
	}
	if s.PCIID != "" && !strings.EqualFold(s.PCIID, fmt.Sprintf("%04x:%04x", n.GetPciVendorId(), n.GetPciDeviceId())) {
		return false
	}
	return s.Model != "" || s.PCIID != ""
}

func ipv4Of(addrs []string) string {
	for _, a := range addrs {
		ip, _, err := net.ParseCIDR(a)
		if err != nil {
			ip = net.ParseIP(a)
		}
		if ip != nil && ip.To4() != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			return ip.String()
		}
	}
	return ""
}

// rdmaDevice is the RDMA device of a network interface (mlx5_0), from
// sysfs: the device's infiniband directory; "" when it has none.
func rdmaDevice(root, ifname string) string {
	ents, err := os.ReadDir(filepath.Join(root, "sys/class/net", ifname, "device/infiniband"))
	if err != nil || len(ents) == 0 {
		return ""
	}
	return ents[0].Name()
}
