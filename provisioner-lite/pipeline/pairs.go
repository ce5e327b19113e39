package pipeline

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/pairplan"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/checks/suite"
	"google.golang.org/protobuf/encoding/protojson"
)

// The node-pair burn-in, reconciled like the rest of a batch: a run whose
// runner reached a node-pair check holds its offer (store.PairWork); the
// batch's first ready run in id order plans the rounds (pairplan.Make)
// once every run of the batch (the active runs of the same mode and
// suite) is ready, or the check's gather time has passed; the others
// adopt its plan; each run sends its runner its slots, and once every
// link of the plan was reported (or the plan's end plus pairJudgeSlack
// passed) judges the batch's links (pairplan.Judge) and sends its runner
// its node's verdicts. Each run writes only its own status; what it needs
// of the others it reads from their stored runs.

const (
	// pairLead is how far ahead of planning the first round starts: every
	// member's look (at most 5 s apart) finds the plan and sends it.
	pairLead = 20 * time.Second
	// pairJudgeSlack is how long past the plan's end a run waits for
	// links not reported before judging them unmeasured.
	pairJudgeSlack = time.Minute
)

// pairObs is what a look sees of the batch: the other runs of the batch
// and of the plans it takes part in.
type pairObs struct {
	peers []store.Run
}

// pairConfigs reads the suite's node-pair checks (nil: none).
func pairConfigs(s *manifests.ValidationSuite) map[string]suite.PairConfig {
	if s == nil {
		return nil
	}
	var out map[string]suite.PairConfig
	for i, c := range s.Spec.Checks {
		if c.Type != manifests.CheckNodePair {
			continue
		}
		cfg, err := suite.PairConfigOf(i, c)
		if err != nil {
			continue // the runner refuses the suite, saying why
		}
		if out == nil {
			out = map[string]suite.PairConfig{}
		}
		out[c.Name] = cfg
	}
	return out
}

// observePairs reads the batch's other runs: the active ones of the run's
// mode and suite, and the members of the plan the run holds (ended ones
// too: their results still count).
func (bc *batchCtl) observePairs(ctx context.Context, r *store.Run) (*pairObs, error) {
	if r.Pipeline.Pair == nil {
		return nil, nil
	}
	runs, err := bc.cfg.Store.ActiveRuns(ctx)
	if err != nil {
		return nil, err
	}
	o := &pairObs{}
	seen := map[string]bool{r.ID: true}
	for _, x := range runs {
		if x.Mode == r.Mode && x.Manifest == r.Manifest && !seen[x.ID] {
			seen[x.ID] = true
			o.peers = append(o.peers, x)
		}
	}
	if pl := r.Pipeline.Pair.Plan; pl != nil {
		for _, m := range pl.Members {
			if seen[m.Run] {
				continue
			}
			seen[m.Run] = true
			x, err := bc.cfg.Store.GetRun(ctx, m.Run)
			if err != nil {
				continue // its links are judged unmeasured
			}
			o.peers = append(o.peers, x)
		}
	}
	return o, nil
}

// pairEvent acts on a runner's node-pair event (an info entry with its
// payload): a new offer starts the run's part afresh, a result is kept.
func (d *batchDecision) pairEvent(ev store.Event) {
	var pe curev1.Event
	if err := protojson.Unmarshal(ev.Payload, &pe); err != nil {
		return
	}
	if in := pe.GetPairReady(); in != nil {
		w := &store.PairWork{Check: in.GetCheck(), Stage: in.GetStage(), ReadyAt: d.obs.now.UTC()}
		if why := in.GetRefused(); why != "" {
			// The coordinator refused the offer (an address not the
			// node's own): the node takes no part in the batch's plan and
			// its check is its own ERROR, never a partner's.
			d.r.Pipeline.Pair = w
			d.pairVerdicts(w, []*curev1.Verdict{{Component: "pair", Check: w.Check, Status: curev1.VerdictStatus_ERROR,
				Message: "this node's offer of ports was refused, so it is left out of the batch's plan: " + why}})
			return
		}
		for _, p := range in.GetPorts() {
			w.Ports = append(w.Ports, store.PairPort{Name: p.GetName(), Address: p.GetAddress(), Transport: p.GetTransport()})
		}
		d.r.Pipeline.Pair = w
		return
	}
	in := pe.GetPairResult()
	w := d.r.Pipeline.Pair
	if in == nil || w == nil || w.Check != in.GetCheck() {
		return
	}
	w.Results = append(w.Results, store.PairResult{Round: int(in.GetRound()), Partner: in.GetPartner(), Port: in.GetPort(), PartnerPort: in.GetPartnerPort(),
		Transport: in.GetTransport(), Forward: in.GetForward(), Reverse: in.GetReverse(), Unit: in.GetUnit(), Error: in.GetError()})
}

// pairs is the run's node-pair step of a look: plan or adopt, judge, and
// send the bound session what it has not had.
func (d *batchDecision) pairs() {
	w := d.r.Pipeline.Pair
	if w == nil || d.b.Current != "validate" {
		return
	}
	cfg, ok := d.pol.pairs[w.Check]
	if !ok {
		return
	}
	if w.Plan == nil && w.Verdicts == nil {
		d.pairPlan(w, cfg)
	}
	if w.Plan != nil && w.Verdicts == nil {
		d.pairJudge(w, cfg)
	}
	bound := d.b.Bound
	if bound.IsZero() {
		return
	}
	if w.Plan != nil && w.ScheduleSent != bound {
		sched, err := pairSchedule(d.r, w, cfg)
		switch {
		case err != nil && w.Verdicts == nil:
			d.pairVerdicts(w, []*curev1.Verdict{{Component: "pair", Check: w.Check, Status: curev1.VerdictStatus_ERROR, Message: "this node's schedule: " + err.Error()}})
		case err == nil:
			w.ScheduleSent = bound
			d.add(action{kind: actPairSend, session: bound, pair: &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_PairSchedule{PairSchedule: sched}}})
		}
	}
	if w.Verdicts != nil && w.VerdictsSent != bound {
		pv := &curev1.PairVerdicts{}
		if err := protojson.Unmarshal(w.Verdicts, pv); err == nil {
			w.VerdictsSent = bound
			d.add(action{kind: actPairSend, session: bound, pair: &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_PairVerdicts{PairVerdicts: pv}}})
		}
	}
}

// pairPlan adopts the plan of the batch's planner that names this run, or,
// when this run is the planner, plans once the batch is gathered.
func (d *batchDecision) pairPlan(w *store.PairWork, cfg suite.PairConfig) {
	now := d.obs.now
	if d.obs.pairs == nil {
		// The offer came in this look, which did not read the batch:
		// look again at once, with it.
		d.add(action{kind: actRequeue})
		return
	}
	peers := d.obs.pairs.peers
	if d.adoptPairPlan(w, peers) {
		return
	}
	ready := []store.Run{*d.r}
	waiting := 0
	for _, p := range peers {
		if !runstate.Active(p.Status) {
			continue
		}
		pw := p.Pipeline.Pair
		switch {
		case pw != nil && pw.Check == w.Check && pw.Plan == nil && pw.Verdicts == nil:
			ready = append(ready, p)
		case pw == nil || pw.Check != w.Check:
			waiting++
		}
	}
	slices.SortFunc(ready, func(a, b store.Run) int { return cmp.Compare(a.ID, b.ID) })
	earliest := w.ReadyAt
	for _, p := range ready {
		if t := p.Pipeline.Pair.ReadyAt; t.Before(earliest) {
			earliest = t
		}
	}
	if ready[0].ID != d.r.ID {
		return // the planner's plan is adopted on a later look
	}
	if waiting > 0 && now.Before(earliest.Add(cfg.Gather)) {
		return
	}
	fail := func(msg string) {
		d.pairVerdicts(w, []*curev1.Verdict{{Component: "pair", Check: w.Check, Status: curev1.VerdictStatus_ERROR, Message: msg}})
	}
	if len(ready) < 2 {
		fail(fmt.Sprintf("no partner: %d other node(s) of the batch did not reach the check within %s, none is ready", waiting, cfg.Gather))
		return
	}
	var members []pairplan.Member
	pm := make([]store.PairMember, 0, len(ready))
	for _, x := range ready {
		m := pairplan.Member{Node: x.NodeID}
		for _, p := range x.Pipeline.Pair.Ports {
			m.Ports = append(m.Ports, pairplan.Port{Name: p.Name, Address: p.Address, Transport: p.Transport})
		}
		members = append(members, m)
		pm = append(pm, store.PairMember{Node: x.NodeID, Run: x.ID, Ports: slices.Clone(x.Pipeline.Pair.Ports)})
	}
	plan, err := pairplan.Make(members, planOptions(cfg))
	if err != nil {
		fail(err.Error())
		return
	}
	key := make([]byte, pairplan.SecretSize)
	if _, err := rand.Read(key); err != nil {
		fail("the plan's key: " + err.Error())
		return
	}
	start := now.Add(pairLead).Truncate(time.Second).UTC()
	w.Plan = &store.PairPlan{Planner: d.r.ID, Members: pm, Start: start, End: start.Add(plan.Length), Notes: plan.Notes, Key: key}
	if waiting > 0 {
		w.Plan.Notes = append(w.Plan.Notes, fmt.Sprintf("%d node(s) of the batch did not reach the check within %s and are left out", waiting, cfg.Gather))
	}
	var nodes []string
	for _, m := range pm {
		nodes = append(nodes, m.Node)
	}
	d.add(action{kind: actEvent, phase: "validate", msg: fmt.Sprintf("node-pair %s: planned %d round(s) for %d nodes (%s), %s to %s", w.Check,
		len(plan.Rounds), len(pm), strings.Join(nodes, ", "), start.Format(time.RFC3339), w.Plan.End.Format(time.RFC3339))})
}

// adoptPairPlan takes the plan a peer made as the batch's planner when it
// names this run; false when no peer's plan does (yet).
func (d *batchDecision) adoptPairPlan(w *store.PairWork, peers []store.Run) bool {
	for _, p := range peers {
		pw := p.Pipeline.Pair
		if pw == nil || pw.Check != w.Check || pw.Plan == nil || pw.Plan.Planner != p.ID {
			continue
		}
		if slices.ContainsFunc(pw.Plan.Members, func(m store.PairMember) bool { return m.Run == d.r.ID }) {
			pl := *pw.Plan
			w.Plan = &pl
			d.add(action{kind: actEvent, phase: "validate", msg: fmt.Sprintf("node-pair %s: in the plan of %s (%d nodes)", w.Check, p.ID, len(pl.Members))})
			return true
		}
	}
	return false
}

func planOptions(cfg suite.PairConfig) pairplan.Options {
	return pairplan.Options{Rounds: cfg.Rounds, Duration: cfg.Transfer, Setup: cfg.Setup, BasePort: cfg.BasePort}
}

func planOf(pl *store.PairPlan, cfg suite.PairConfig) (*pairplan.Plan, error) {
	var members []pairplan.Member
	for _, m := range pl.Members {
		pm := pairplan.Member{Node: m.Node}
		for _, p := range m.Ports {
			pm.Ports = append(pm.Ports, pairplan.Port{Name: p.Name, Address: p.Address, Transport: p.Transport})
		}
		members = append(members, pm)
	}
	return pairplan.Make(members, planOptions(cfg))
}

// pairJudge judges the batch once every link of the plan was reported, or
// once the plan's end plus pairJudgeSlack passed.
func (d *batchDecision) pairJudge(w *store.PairWork, cfg suite.PairConfig) {
	plan, err := planOf(w.Plan, cfg)
	if err != nil {
		d.pairVerdicts(w, []*curev1.Verdict{{Component: "pair", Check: w.Check, Status: curev1.VerdictStatus_ERROR, Message: "the batch's plan: " + err.Error()}})
		return
	}
	byNode := map[string]*store.Run{d.r.NodeID: d.r}
	if d.obs.pairs != nil {
		for i := range d.obs.pairs.peers {
			p := &d.obs.pairs.peers[i]
			if slices.ContainsFunc(w.Plan.Members, func(m store.PairMember) bool { return m.Run == p.ID }) {
				byNode[p.NodeID] = p
			}
		}
	}
	var links []pairplan.Link
	complete := true
	for _, rd := range plan.Rounds {
		for _, s := range rd.Slots {
			l := pairplan.Link{Slot: s, Round: rd.Index}
			var res *store.PairResult
			if c := byNode[s.Client]; c != nil && c.Pipeline.Pair != nil && c.Pipeline.Pair.Check == w.Check {
				for i, x := range c.Pipeline.Pair.Results {
					if x.Round == rd.Index && x.Partner == s.Server && x.Port == s.ClientPort {
						res = &c.Pipeline.Pair.Results[i]
					}
				}
			}
			switch {
			case res == nil:
				complete = false
				l.Err = fmt.Sprintf("no result from %s, the client (its runner did not report the link by %s after the plan's end)", s.Client, pairJudgeSlack)
			case res.Error != "":
				l.Err = res.Error
			default:
				l.Forward, l.Reverse = res.Forward, res.Reverse
			}
			links = append(links, l)
		}
	}
	if !complete && d.obs.now.Before(w.Plan.End.Add(pairJudgeSlack)) {
		return
	}
	vs := pairplan.Judge(w.Check, links, pairplan.Bars{EthernetMbps: cfg.EthernetMbps, RDMAGbps: cfg.RDMAGbps})[d.r.NodeID]
	if len(vs) == 0 {
		vs = []*curev1.Verdict{{Component: "pair", Check: w.Check, Status: curev1.VerdictStatus_SKIP,
			Message: "this node had no partner in the plan's rounds (ports without a partner port)"}}
	}
	d.pairVerdicts(w, vs)
	worst := curev1.VerdictStatus_PASS
	for _, v := range vs {
		if v.GetStatus() == curev1.VerdictStatus_FAIL || v.GetStatus() == curev1.VerdictStatus_ERROR && worst != curev1.VerdictStatus_FAIL {
			worst = v.GetStatus()
		}
	}
	d.add(action{kind: actEvent, phase: "validate", msg: fmt.Sprintf("node-pair %s: judged %d link(s) of the batch; this node: %d verdict(s), worst %s",
		w.Check, len(links), len(vs), worst)})
}

func (d *batchDecision) pairVerdicts(w *store.PairWork, vs []*curev1.Verdict) {
	b, err := protojson.Marshal(&curev1.PairVerdicts{Check: w.Check, Verdicts: vs})
	if err != nil {
		return
	}
	w.Verdicts = b
}

// pairSchedule is the run's node's part of the plan.
func pairSchedule(r *store.Run, w *store.PairWork, cfg suite.PairConfig) (*curev1.PairSchedule, error) {
	plan, err := planOf(w.Plan, cfg)
	if err != nil {
		return nil, err
	}
	s := &curev1.PairSchedule{Check: w.Check, Batch: r.Manifest, StartUnixMs: w.Plan.Start.UnixMilli(), EndUnixMs: w.Plan.End.UnixMilli(),
		DurationMs: cfg.Transfer.Milliseconds(), Rounds: uint32(len(plan.Rounds)), Notes: w.Plan.Notes}
	for _, m := range w.Plan.Members {
		s.Members = append(s.Members, m.Node)
	}
	for _, rd := range plan.Rounds {
		for _, sl := range rd.For(r.NodeID) {
			secret := pairplan.SlotSecret(w.Plan.Key, rd.Index, sl)
			if secret == nil {
				return nil, fmt.Errorf("the batch's plan by %s has a key of %d bytes (want %d): no secret for its test servers", w.Plan.Planner, len(w.Plan.Key), pairplan.SecretSize)
			}
			ps := &curev1.PairSlot{Round: uint32(rd.Index), TcpPort: uint32(sl.TCPPort), Transport: sl.Transport,
				StartUnixMs: w.Plan.Start.Add(rd.Start).UnixMilli(), EndUnixMs: w.Plan.Start.Add(rd.End).UnixMilli(), Secret: secret}
			if sl.Server == r.NodeID {
				ps.Role, ps.Partner, ps.Port, ps.Address, ps.PartnerPort, ps.PartnerAddress = "server", sl.Client, sl.ServerPort, sl.ServerAddr, sl.ClientPort, sl.ClientAddr
			} else {
				ps.Role, ps.Partner, ps.Port, ps.Address, ps.PartnerPort, ps.PartnerAddress = "client", sl.Server, sl.ClientPort, sl.ClientAddr, sl.ServerPort, sl.ServerAddr
			}
			s.Slots = append(s.Slots, ps)
		}
	}
	return s, nil
}
