package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
)

// Bounds of a heartbeat: a suite has tens of checks.
const maxProgressChecks = 512

var progressStates = []string{"pending", "running", "done", "interrupted"}

// runnerProgress turns a runner's heartbeat into what the store keeps:
// attributed to the session, of a runner phase of its run, every string
// cleaned and bounded, numbers not negative, at most maxProgressChecks
// checks, a worst verdict only one a runner may give.
func runnerProgress(runID, bootID string, ev *curev1.Event, runnerPhases map[modes.PhaseName]bool) (store.ProgressRecord, error) {
	if ev.GetSeq() == 0 || ev.GetSeq() > 1<<62 {
		return store.ProgressRecord{}, fmt.Errorf("event seq %d: want 1..2^62", ev.GetSeq())
	}
	phase := modes.PhaseName(ev.GetPhase()) // the runner's word: refused unless a runner phase of the run
	if !runnerPhases[phase] {
		return store.ProgressRecord{}, fmt.Errorf("event seq %d: progress of %q, not a runner phase of this run", ev.GetSeq(), textsafe.BoundedLine(ev.GetPhase(), maxName))
	}
	in := ev.GetProgress()
	nonNeg := func(x int64) int64 { return max(x, 0) }
	out := &curev1.Progress{
		Suite: textsafe.BoundedLine(in.GetSuite(), maxName), Stage: textsafe.BoundedLine(in.GetStage(), maxName),
		ElapsedMs: nonNeg(in.GetElapsedMs()), PlannedMs: nonNeg(in.GetPlannedMs()), RemainingMs: nonNeg(in.GetRemainingMs()), Resumed: in.GetResumed(),
	}
	for i, c := range in.GetChecks() {
		if i == maxProgressChecks {
			break
		}
		st := c.GetState()
		if !slices.Contains(progressStates, st) {
			return store.ProgressRecord{}, fmt.Errorf("event seq %d: check %d of the progress has state %q (want one of %s)",
				ev.GetSeq(), i, textsafe.BoundedLine(st, maxName), strings.Join(progressStates, ", "))
		}
		worst := c.GetWorst()
		if _, known := curev1.VerdictStatus_name[int32(worst)]; !known || worst == curev1.VerdictStatus_MARGINAL {
			worst = curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED // MARGINAL is the coordinator's to give
		}
		out.Checks = append(out.Checks, &curev1.CheckProgress{Check: textsafe.BoundedLine(c.GetCheck(), maxName), Stage: textsafe.BoundedLine(c.GetStage(), maxName),
			State: st, ElapsedMs: nonNeg(c.GetElapsedMs()), PlannedMs: nonNeg(c.GetPlannedMs()), Worst: worst})
	}
	js, err := protojson.Marshal(out)
	if err != nil {
		return store.ProgressRecord{}, err
	}
	return store.ProgressRecord{RunID: runID, BootID: bootID, Seq: ev.GetSeq(), Phase: phase, Time: time.UnixMilli(ev.GetTimeUnixMs()).UTC(), JSON: js}, nil
}

// runnerEvent turns a runner's event into what the store keeps: attributed to
// the session (node, run, boot), every string cleaned and bounded, the phase
// one the run's mode gives the runner. Only a phase_end keeps its proto
// payload (the pipeline reads reboot_required from it).
func runnerEvent(nodeID, runID, bootID string, ev *curev1.Event, runnerPhases map[modes.PhaseName]bool) (store.Event, *store.Verdict, error) {
	if ev.GetSeq() == 0 || ev.GetSeq() > 1<<62 {
		return store.Event{}, nil, fmt.Errorf("event seq %d: want 1..2^62", ev.GetSeq())
	}
	phase := modes.PhaseName(ev.GetPhase()) // the runner's word: refused unless none or a runner phase of the run
	if phase != "" && !runnerPhases[phase] {
		return store.Event{}, nil, fmt.Errorf("event seq %d: phase %q is not a runner phase of this run", ev.GetSeq(), textsafe.BoundedLine(ev.GetPhase(), maxName))
	}
	t := time.UnixMilli(ev.GetTimeUnixMs()).UTC()
	e := store.Event{RunID: runID, NodeID: nodeID, Source: runstate.SourceRunner, BootID: bootID, Seq: ev.GetSeq(), Time: t, Phase: phase}
	var v *store.Verdict
	var err error
	switch b := ev.GetBody().(type) {
	case *curev1.Event_PhaseStart:
		e.Kind = runstate.EventPhaseStart
	case *curev1.Event_PhaseEnd:
		e.Kind = runstate.EventPhaseEnd
		e.Status = phaseStatus(b.PhaseEnd.GetStatus())
		e.Message = textsafe.Bounded(b.PhaseEnd.GetMessage(), maxMessage)
		e.DurationMs = max(b.PhaseEnd.GetDurationMs(), 0)
		payload, err := protojson.Marshal(&curev1.Event{Seq: ev.GetSeq(), Phase: string(phase), Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{
			Status: b.PhaseEnd.GetStatus(), Message: e.Message, RebootRequired: b.PhaseEnd.GetRebootRequired(), DurationMs: e.DurationMs}}})
		if err != nil {
			return store.Event{}, nil, err
		}
		e.Payload = payload
	case *curev1.Event_Verdict:
		in := b.Verdict
		status := in.GetStatus()
		if _, known := curev1.VerdictStatus_name[int32(status)]; !known || status == curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict status %d is not a verdict", ev.GetSeq(), status)
		}
		if status == curev1.VerdictStatus_MARGINAL {
			// The fleet band is the coordinator's judgement of the node
			// against its peers; a runner cannot pass it off as its own.
			return store.Event{}, nil, fmt.Errorf("event seq %d: a runner cannot send a MARGINAL verdict (the coordinator judges fleet bands)", ev.GetSeq())
		}
		v = &store.Verdict{
			RunID: runID, Component: textsafe.BoundedLine(in.GetComponent(), maxName), Check: textsafe.BoundedLine(in.GetCheck(), maxName),
			Status: status, Observed: textsafe.Bounded(in.GetObserved(), maxValue), Expected: textsafe.Bounded(in.GetExpected(), maxValue),
			Message: textsafe.Bounded(in.GetMessage(), maxMessage), Time: t,
		}
		if v.Component == "" || v.Check == "" {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict without component or check", ev.GetSeq())
		}
		// When the finding happened (a bar on a sampled series) and its stage.
		if at := in.GetAtUnixMs(); at > 0 && at < 1<<50 {
			v.At = time.UnixMilli(at).UTC()
		}
		v.Stage = textsafe.BoundedLine(in.GetStage(), maxName)
		if v.Measurements, err = verdictMeasurements(in.GetMeasurements()); err != nil {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict %s %s: %w", ev.GetSeq(), v.Component, v.Check, err)
		}
		e.Kind = runstate.EventVerdict
		e.Status = runstate.VerdictName(v.Status)
		e.Message = textsafe.Truncate(fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Message), maxMessage)
	case *curev1.Event_Log:
		e.Kind = runstate.EventLog
		e.Status = textsafe.BoundedLine(strings.ToUpper(b.Log.GetLevel()), 8)
		e.Message = textsafe.Bounded(b.Log.GetMessage()+logAttrs(b.Log.GetAttrs()), maxMessage)
	case *curev1.Event_Metric:
		m := b.Metric
		e.Kind = runstate.EventMetric
		e.Message = textsafe.BoundedLine(fmt.Sprintf("%s=%g%s%s", m.GetName(), m.GetValue(), m.GetUnit(), logAttrs(m.GetLabels())), maxValue)
	case *curev1.Event_PairReady, *curev1.Event_PairResult:
		// The node-pair burn-in's exchange: an info entry of the runner's
		// on the timeline, its payload what the pipeline acts on.
		clean, msg, err := pairEvent(ev)
		if err != nil {
			return store.Event{}, nil, fmt.Errorf("event seq %d: %w", ev.GetSeq(), err)
		}
		e.Kind = runstate.EventInfo
		e.Message = textsafe.Bounded(msg, maxMessage)
		if e.Payload, err = protojson.Marshal(clean); err != nil {
			return store.Event{}, nil, err
		}
	default:
		return store.Event{}, nil, fmt.Errorf("event seq %d has no body", ev.GetSeq())
	}
	return e, v, nil
}

// maxPairPorts bounds the ports a runner may offer (an HGX node has 8
// compute and 2 storage ports).
const maxPairPorts = 32

// pairEvent is a runner's PairReady or PairResult cleaned and checked
// (names bounded, addresses IP addresses, transports known, rates finite),
// with its timeline line.
func pairEvent(ev *curev1.Event) (*curev1.Event, string, error) {
	out := &curev1.Event{Seq: ev.GetSeq(), Phase: ev.GetPhase()}
	transport := func(t string) error {
		if t != "ethernet" && t != "rdma" {
			return fmt.Errorf("node-pair transport %q (want ethernet or rdma)", textsafe.BoundedLine(t, maxName))
		}
		return nil
	}
	if in := ev.GetPairReady(); in != nil {
		// Refused is the coordinator's (pairOffer), set before this.
		r := &curev1.PairReady{Check: textsafe.BoundedLine(in.GetCheck(), maxName), Stage: textsafe.BoundedLine(in.GetStage(), maxName),
			Refused: textsafe.Bounded(in.GetRefused(), maxValue)}
		if r.Check == "" || len(in.GetPorts()) == 0 || len(in.GetPorts()) > maxPairPorts {
			return nil, "", fmt.Errorf("node-pair ready: check %q with %d ports (want a check and 1..%d ports)", r.Check, len(in.GetPorts()), maxPairPorts)
		}
		var names []string
		for _, p := range in.GetPorts() {
			ip := net.ParseIP(p.GetAddress())
			if ip == nil {
				return nil, "", fmt.Errorf("node-pair ready: port %q address %q is not an IP address", textsafe.BoundedLine(p.GetName(), maxName), textsafe.BoundedLine(p.GetAddress(), maxName))
			}
			if err := transport(p.GetTransport()); err != nil {
				return nil, "", err
			}
			pp := &curev1.PairPort{Name: textsafe.BoundedLine(p.GetName(), maxName), Address: ip.String(), Transport: p.GetTransport()}
			r.Ports = append(r.Ports, pp)
			names = append(names, fmt.Sprintf("%s %s (%s)", pp.Name, pp.Address, pp.Transport))
		}
		out.Body = &curev1.Event_PairReady{PairReady: r}
		if r.Refused != "" {
			return out, fmt.Sprintf("node-pair %s: offer of ports %s refused: %s", r.Check, strings.Join(names, ", "), r.Refused), nil
		}
		return out, fmt.Sprintf("node-pair %s: ports offered: %s", r.Check, strings.Join(names, ", ")), nil
	}
	in := ev.GetPairResult()
	r := &curev1.PairResult{Check: textsafe.BoundedLine(in.GetCheck(), maxName), Round: in.GetRound(), Partner: textsafe.BoundedLine(in.GetPartner(), maxName),
		Port: textsafe.BoundedLine(in.GetPort(), maxName), PartnerPort: textsafe.BoundedLine(in.GetPartnerPort(), maxName),
		Transport: in.GetTransport(), Forward: in.GetForward(), Reverse: in.GetReverse(), Unit: textsafe.BoundedLine(in.GetUnit(), 16),
		Error: textsafe.Bounded(in.GetError(), maxValue)}
	if err := transport(r.Transport); err != nil {
		return nil, "", err
	}
	for _, x := range []float64{r.Forward, r.Reverse} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return nil, "", fmt.Errorf("node-pair result: rate %v", x)
		}
	}
	if r.Check == "" || r.Partner == "" {
		return nil, "", errors.New("node-pair result without check or partner")
	}
	out.Body = &curev1.Event_PairResult{PairResult: r}
	msg := fmt.Sprintf("node-pair %s round %d: %s to %s:%s: forward %g %s, reverse %g %s", r.Check, r.Round, r.Port, r.Partner, r.PartnerPort, r.Forward, r.Unit, r.Reverse, r.Unit)
	if r.Error != "" {
		msg = fmt.Sprintf("node-pair %s round %d: %s to %s:%s not measured: %s", r.Check, r.Round, r.Port, r.Partner, r.PartnerPort, r.Error)
	}
	return out, msg, nil
}

// logAttrs renders up to maxAttrs key=value pairs, sorted, for the timeline.
func logAttrs(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i == maxAttrs {
			fmt.Fprintf(&b, " (+%d attrs)", len(keys)-maxAttrs)
			break
		}
		fmt.Fprintf(&b, " %s=%s", textsafe.BoundedLine(k, 64), textsafe.BoundedLine(m[k], 256))
	}
	return b.String()
}

// phaseStatus is the stored name of the status a runner's PhaseEnd
// reports: what is not an end it can report counts as a failure.
func phaseStatus(s curev1.PhaseStatus) string {
	switch s {
	case curev1.PhaseStatus_PHASE_OK, curev1.PhaseStatus_PHASE_SKIPPED, curev1.PhaseStatus_PHASE_FAILED:
		return runstate.PhaseName(s)
	case curev1.PhaseStatus_PHASE_RUNNING, curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED:
		return runstate.PhaseName(curev1.PhaseStatus_PHASE_FAILED)
	default:
		return runstate.PhaseName(curev1.PhaseStatus_PHASE_FAILED) // a status newer than this coordinator
	}
}

// keepRunnerEvent stores a runner event. A metric or log of an attested
// boot is progress: answered at once and written within
// store.ProgressFlushEvery, ahead of the run's next durable event (a
// coordinator crash loses at most the last second of them). Every other
// event (phases, verdicts, pair exchanges, an unattested boot's) changes
// or proves state and is durable before its ack.
func (s *RunnerService) keepRunnerEvent(ctx context.Context, e store.Event, v *store.Verdict, admitted bool) (store.AppendResult, error) {
	if admitted && v == nil && (e.Kind == runstate.EventMetric || e.Kind == runstate.EventLog) {
		return s.Store.QueueRunnerEvent(ctx, e, s.Limits)
	}
	return s.Store.AppendRunnerEvent(ctx, e, v, s.Limits)
}
