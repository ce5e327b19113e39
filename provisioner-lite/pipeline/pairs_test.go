package pipeline

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/checks/suite"
	"google.golang.org/protobuf/encoding/protojson"
)

// pairRun is run rN of node nN in the validate phase of a burn-in batch,
// its runner bound.
func pairRun(i int) store.Run {
	return store.Run{ID: fmt.Sprintf("r%d", i), NodeID: fmt.Sprintf("n%d", i), Mode: modes.Burnin, Manifest: "qemu-pairs",
		Status: curev1.RunStatus_RUN_RUNNING, Phase: modes.Validate,
		Pipeline: store.PipelineState{Batch: &store.RunnerBatch{Phases: []modes.PhaseName{modes.Validate}, Current: modes.Validate,
			Bound: store.SessionRef{BootID: fmt.Sprintf("boot-%d", i), ConnectedNs: 1}}}}
}

func pairPayload(t *testing.T, id int64, body *curev1.Event) store.Event {
	b, err := protojson.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return store.Event{ID: id, Source: runstate.SourceRunner, Phase: modes.Validate, Kind: runstate.EventInfo, Payload: b}
}

// pairLook is one look of run i: its events acted on, then the node-pair
// step over the others' stored runs.
func pairLook(runs []store.Run, i int, at time.Time, pol batchPolicy, events ...store.Event) (store.Run, []action) {
	r := cloneRun(runs[i])
	var peers []store.Run
	for j, x := range runs {
		if j != i {
			peers = append(peers, x)
		}
	}
	d := &batchDecision{r: &r, b: r.Pipeline.Batch, pol: pol, obs: batchObs{now: at, events: events, pairs: &pairObs{peers: peers}}}
	d.actOnEvents()
	d.pairs()
	return r, d.acts
}

// TestPairBatchReconciled: three runs of a batch reach the node-pair
// check one after another; the first in id order plans once all are
// there, the others adopt its plan; each run's runner gets its own slots;
// with n3's links slow the batch's judgement names n3's port on n3 and
// passes the others (their links to n3 SKIP, explained by it).
func TestPairBatchReconciled(t *testing.T) {
	cfg := suite.PairConfig{Check: "pairs", Transport: "ethernet", Rounds: 3, Transfer: 3 * time.Second, Setup: 2 * time.Second,
		Gather: 5 * time.Minute, BasePort: 5301, EthernetMbps: 100}
	pol := batchPolicy{phases: []modes.PhaseName{modes.Validate}, pairs: map[string]suite.PairConfig{"pairs": cfg}}
	runs := []store.Run{pairRun(1), pairRun(2), pairRun(3)}
	ready := func(i int) store.Event {
		return pairPayload(t, 10, &curev1.Event{Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs",
			Ports: []*curev1.PairPort{{Name: "eth0", Address: fmt.Sprintf("10.77.0.%d", 10+i), Transport: "ethernet"}}}}})
	}
	// The look that reads an offer has not read the batch: it looks again
	// at once rather than plan alone.
	{
		r := cloneRun(runs[1])
		d := &batchDecision{r: &r, b: r.Pipeline.Batch, pol: pol, obs: batchObs{now: now, events: []store.Event{ready(2)}}}
		d.actOnEvents()
		d.pairs()
		if r.Pipeline.Pair == nil || r.Pipeline.Pair.Verdicts != nil || len(d.acts) != 1 || d.acts[0].kind != actRequeue {
			t.Fatalf("offer without the batch: %+v %v", r.Pipeline.Pair, describe(d.acts))
		}
	}
	// n2 and n3 ready: n2 is not the planner (r1 is in the batch, not
	// ready yet) and n3 waits for it.
	for _, i := range []int{1, 2} {
		var acts []action
		runs[i], acts = pairLook(runs, i, now, pol, ready(i+1))
		if runs[i].Pipeline.Pair == nil || runs[i].Pipeline.Pair.Plan != nil || len(acts) != 0 {
			t.Fatalf("run %d: %+v %v", i+1, runs[i].Pipeline.Pair, describe(acts))
		}
	}
	// n1 ready: everyone is there, r1 plans.
	var acts []action
	runs[0], acts = pairLook(runs, 0, now.Add(time.Second), pol, ready(1))
	pl := runs[0].Pipeline.Pair.Plan
	if pl == nil || pl.Planner != "r1" || len(pl.Members) != 3 || !pl.Start.Equal(now.Add(time.Second+pairLead).Truncate(time.Second)) {
		t.Fatalf("plan %+v", pl)
	}
	if len(acts) != 2 || acts[1].kind != actPairSend || acts[1].pair.GetPairSchedule() == nil {
		t.Fatalf("actions %v", describe(acts))
	}
	// The others adopt it and send their slots.
	scheds := map[string]*curev1.PairSchedule{"n1": acts[1].pair.GetPairSchedule()}
	for _, i := range []int{1, 2} {
		runs[i], acts = pairLook(runs, i, now.Add(2*time.Second), pol)
		if p := runs[i].Pipeline.Pair.Plan; p == nil || p.Planner != "r1" {
			t.Fatalf("run %d did not adopt: %+v", i+1, p)
		}
		scheds[runs[i].NodeID] = acts[len(acts)-1].pair.GetPairSchedule()
	}
	// Three rounds, each node in two (one idle a round), roles mixed.
	for node, s := range scheds {
		if s.GetRounds() != 3 || len(s.GetSlots()) != 2 || s.GetDurationMs() != 3000 {
			t.Fatalf("%s schedule %v", node, s)
		}
		for _, sl := range s.GetSlots() {
			if sl.GetEndUnixMs()-sl.GetStartUnixMs() != 10000 || sl.GetTcpPort() != 5301 || !strings.HasPrefix(sl.GetAddress(), "10.77.0.1") {
				t.Errorf("%s slot %v", node, sl)
			}
		}
	}
	// A look again sends nothing more to the same session.
	if _, acts := pairLook(runs, 0, now.Add(3*time.Second), pol); len(acts) != 0 {
		t.Errorf("second look: %v", describe(acts))
	}
	// Each client reports its links; n3's are slow.
	sent := map[string]*curev1.PairVerdicts{}
	for node, s := range scheds {
		i := int(node[1] - '1')
		var evs []store.Event
		for k, sl := range s.GetSlots() {
			if sl.GetRole() != "client" {
				continue
			}
			fwd, rev := 900.0, 880.0
			if node == "n3" || sl.GetPartner() == "n3" {
				rev = 40
			}
			evs = append(evs, pairPayload(t, int64(20+k), &curev1.Event{Body: &curev1.Event_PairResult{PairResult: &curev1.PairResult{Check: "pairs",
				Round: sl.GetRound(), Partner: sl.GetPartner(), Port: sl.GetPort(), PartnerPort: sl.GetPartnerPort(), Transport: "ethernet",
				Forward: fwd, Reverse: rev, Unit: "Mb/s"}}}))
		}
		runs[i], acts = pairLook(runs, i, now.Add(40*time.Second), pol, evs...)
		if len(acts) > 0 {
			sent[node] = acts[len(acts)-1].pair.GetPairVerdicts()
		}
	}
	// All reported: every run judges at its next look (the last to
	// report judged at once).
	got := map[string]map[string]curev1.VerdictStatus{}
	for i := range runs {
		runs[i], acts = pairLook(runs, i, now.Add(41*time.Second), pol)
		pv := sent[runs[i].NodeID]
		if len(acts) > 0 {
			pv = acts[len(acts)-1].pair.GetPairVerdicts()
		}
		if pv == nil {
			t.Fatalf("run %d: no verdicts sent: %v", i+1, describe(acts))
		}
		got[runs[i].NodeID] = map[string]curev1.VerdictStatus{}
		for _, v := range pv.GetVerdicts() {
			got[runs[i].NodeID][v.GetComponent()] = v.GetStatus()
		}
	}
	want := map[string]map[string]curev1.VerdictStatus{
		"n1": {"pair/n1:eth0-n2:eth0": pass, "pair/n1:eth0-n3:eth0": skip},
		"n2": {"pair/n1:eth0-n2:eth0": pass, "pair/n2:eth0-n3:eth0": skip},
		"n3": {"nic/eth0": fail, "pair/n1:eth0-n3:eth0": fail, "pair/n2:eth0-n3:eth0": fail},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("verdicts\n%v\nwant\n%v", got, want)
	}
	// A reconnected runner (new session) is given its verdicts again.
	runs[0].Pipeline.Batch.Bound = store.SessionRef{BootID: "boot-1b", ConnectedNs: 2}
	if _, acts := pairLook(runs, 0, now.Add(50*time.Second), pol); len(acts) != 2 {
		t.Errorf("after a reconnect: %v", describe(acts))
	}
}

const (
	pass = curev1.VerdictStatus_PASS
	fail = curev1.VerdictStatus_FAIL
	skip = curev1.VerdictStatus_SKIP
)

// TestPairBatchGatherAndSlack: a lone ready node past the gather time is
// an ERROR naming why; a plan whose client never reports is judged past
// the plan's end plus the slack, the missing link an ERROR.
func TestPairBatchGatherAndSlack(t *testing.T) {
	cfg := suite.PairConfig{Check: "pairs", Transport: "ethernet", Transfer: time.Second, Setup: time.Second, Gather: time.Minute, BasePort: 5301, EthernetMbps: 100}
	pol := batchPolicy{phases: []modes.PhaseName{modes.Validate}, pairs: map[string]suite.PairConfig{"pairs": cfg}}
	runs := []store.Run{pairRun(1), pairRun(2)}
	ev := pairPayload(t, 10, &curev1.Event{Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs",
		Ports: []*curev1.PairPort{{Name: "eth0", Address: "10.77.0.11", Transport: "ethernet"}}}}})
	runs[0], _ = pairLook(runs, 0, now, pol, ev)
	if r, acts := pairLook(runs, 0, now.Add(30*time.Second), pol); r.Pipeline.Pair.Verdicts != nil || len(acts) != 0 {
		t.Fatalf("judged before the gather time: %v", describe(acts))
	}
	r, acts := pairLook(runs, 0, now.Add(61*time.Second), pol)
	pv := acts[len(acts)-1].pair.GetPairVerdicts()
	if len(pv.GetVerdicts()) != 1 || pv.GetVerdicts()[0].GetStatus() != curev1.VerdictStatus_ERROR ||
		!strings.Contains(pv.GetVerdicts()[0].GetMessage(), "no partner: 1 other node(s) of the batch did not reach the check within 1m0s") {
		t.Fatalf("lone node: %v", pv)
	}
	_ = r

	// Two ready; n2's result never comes.
	runs = []store.Run{pairRun(1), pairRun(2)}
	runs[0], _ = pairLook(runs, 0, now, pol, ev)
	ev2 := pairPayload(t, 10, &curev1.Event{Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs",
		Ports: []*curev1.PairPort{{Name: "eth0", Address: "10.77.0.12", Transport: "ethernet"}}}}})
	runs[1], _ = pairLook(runs, 1, now, pol, ev2)
	runs[0], _ = pairLook(runs, 0, now, pol)
	end := runs[0].Pipeline.Pair.Plan.End
	if r, _ := pairLook(runs, 0, end.Add(30*time.Second), pol); r.Pipeline.Pair.Verdicts != nil {
		t.Fatal("judged inside the slack")
	}
	_, acts = pairLook(runs, 0, end.Add(pairJudgeSlack+time.Second), pol)
	pv = acts[len(acts)-1].pair.GetPairVerdicts()
	if len(pv.GetVerdicts()) != 1 || pv.GetVerdicts()[0].GetStatus() != curev1.VerdictStatus_ERROR || !strings.Contains(pv.GetVerdicts()[0].GetMessage(), "no result from") {
		t.Fatalf("missing link: %v", pv)
	}
}

// TestPairAddressMustBeOwn (the pipeline's half; the server's refuses the
// offer, provisioner-lite/server): an offer the coordinator refused (an
// address not the node's own) makes the node's check its own ERROR at
// once, naming why; it is not in the batch's plan, nobody waits for it,
// and its would-be partners are planned and keyed among themselves: each
// link's secret is the same at both ends, its own per window.
func TestPairAddressMustBeOwn(t *testing.T) {
	cfg := suite.PairConfig{Check: "pairs", Transport: "ethernet", Rounds: 3, Transfer: time.Second, Setup: time.Second, Gather: time.Hour, BasePort: 5301, EthernetMbps: 100}
	pol := batchPolicy{phases: []modes.PhaseName{modes.Validate}, pairs: map[string]suite.PairConfig{"pairs": cfg}}
	runs := []store.Run{pairRun(1), pairRun(2), pairRun(3), pairRun(4)}
	offer := func(i int, refused string) store.Event {
		return pairPayload(t, 10, &curev1.Event{Body: &curev1.Event_PairReady{PairReady: &curev1.PairReady{Check: "pairs", Refused: refused,
			Ports: []*curev1.PairPort{{Name: "eth0", Address: fmt.Sprintf("10.77.0.%d", 10+i), Transport: "ethernet"}}}}})
	}
	var acts []action
	runs[2], acts = pairLook(runs, 2, now, pol, offer(3, "port eth0 address 10.77.0.1 is not this node's (its session comes from 10.77.0.13)"))
	pv := acts[len(acts)-1].pair.GetPairVerdicts()
	if w := runs[2].Pipeline.Pair; w == nil || w.Plan != nil || len(pv.GetVerdicts()) != 1 || pv.GetVerdicts()[0].GetStatus() != curev1.VerdictStatus_ERROR ||
		pv.GetVerdicts()[0].GetComponent() != "pair" || !strings.Contains(pv.GetVerdicts()[0].GetMessage(), "refused") ||
		!strings.Contains(pv.GetVerdicts()[0].GetMessage(), "10.77.0.1 is not this node's") {
		t.Fatalf("refused offer: %+v %v", runs[2].Pipeline.Pair, describe(acts))
	}
	scheds := map[int]*curev1.PairSchedule{}
	for _, i := range []int{3, 1, 0} {
		runs[i], acts = pairLook(runs, i, now.Add(time.Second), pol, offer(i+1, ""))
		if len(acts) > 0 {
			scheds[i] = acts[len(acts)-1].pair.GetPairSchedule() // the planner's
		}
	}
	pl := runs[0].Pipeline.Pair.Plan
	if pl == nil || len(pl.Members) != 3 || slices.ContainsFunc(pl.Members, func(m store.PairMember) bool { return m.Node == "n3" }) || len(pl.Key) != 32 {
		t.Fatalf("plan without the refused node, at once: %+v", pl)
	}
	secrets := map[string][]byte{} // round/server/client -> secret, as each end got it
	for _, i := range []int{0, 1, 3} {
		r, acts := pairLook(runs, i, now.Add(2*time.Second), pol)
		runs[i] = r
		sched := scheds[i]
		if len(acts) > 0 {
			sched = acts[len(acts)-1].pair.GetPairSchedule()
		}
		if sched == nil {
			t.Fatalf("run %d: no schedule: %v", i+1, describe(acts))
		}
		for _, s := range sched.GetSlots() {
			if len(s.GetSecret()) != 32 {
				t.Fatalf("n%d slot %v without a secret", i+1, s)
			}
			server, client := r.NodeID, s.GetPartner()
			if s.GetRole() == "client" {
				server, client = client, server
			}
			k := fmt.Sprintf("%d/%s/%s", s.GetRound(), server, client)
			if prev, ok := secrets[k]; ok && !bytes.Equal(prev, s.GetSecret()) {
				t.Errorf("link %s: the two ends got different secrets", k)
			}
			secrets[k] = s.GetSecret()
		}
	}
	seen := map[string]string{}
	for k, s := range secrets {
		if other, dup := seen[string(s)]; dup {
			t.Errorf("links %s and %s share a secret", k, other)
		}
		seen[string(s)] = k
	}
	if len(secrets) != 3 {
		t.Errorf("links %v, want the 3 of a batch of 3", secrets)
	}
}
