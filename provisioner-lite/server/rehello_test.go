package server_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// A runner that re-sends its Hello thousands of times on one boot (same
// token and secret, a new session each time, over new connections now and
// then) is held to its boot's session budget: what it makes the store keep
// stays within its run's caps (one connect event, one reconnect summary),
// the report stays small, the boot counts once in the boot-stage histogram,
// its first inventory stands, the refusals are rate-limited security
// events, and the run still takes its verdicts.
func TestReHelloFloodBounded(t *testing.T) {
	lim := store.EventLimits{MaxEvents: 200, MaxBytes: 256 << 10, HardEvents: 220, MaxVerdicts: 20}
	const burst = 20
	h := newHostile(t, func(rs *server.RunnerService) {
		rs.Limits = lim
		rs.SessionBurst = burst
		rs.SessionRate = 1e-6 // no refill while the test runs: what gets through is the burst
	})
	tok := h.fetchToken(nodeA.mac)
	secret := "secret-of-boot1" + strings.Repeat("x", 32)
	hello := func(i int) *curev1.RunnerMessage {
		return &curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{
			Token: tok, BootId: "boot1", SessionSecret: secret,
			Identity:  &curev1.Identity{BootMac: nodeA.mac, SystemSerial: nodeA.serial, NodeId: nodeA.id},
			State:     &curev1.RunnerState{Kind: curev1.RunnerState_IN_PHASE, RunId: nodeA.run, Phase: string(modes.SEDRevert), LastEventSeq: 1},
			Inventory: &curev1.Inventory{CpuModel: fmt.Sprintf("cpu-of-hello-%d", i), CpuCount: 64},
			// A hostile runner sends its boot timeline every time.
			BootStages: []*curev1.BootStage{
				{Name: curev1.BootStageInitStarted, UptimeMs: 2000}, {Name: curev1.BootStageModulesLoaded, UptimeMs: 3500}, {Name: curev1.BootStageHelloSent, UptimeMs: 4000},
			},
		}}}
	}
	verdict := func(seq uint64, check string) *curev1.Event {
		return &curev1.Event{Seq: seq, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: "disk/nvme0n1", Check: check, Status: curev1.VerdictStatus_PASS, Message: "marker gone"}}}
	}
	logsBefore := strings.Count(h.logs.String(), "\n")

	conn := h.conn("", nil)
	open := func(i int) (curev1.RunnerService_SessionClient, context.CancelFunc, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := curev1.NewRunnerServiceClient(conn).Session(ctx)
		if err == nil {
			err = s.Send(hello(i))
		}
		if err != nil {
			cancel()
			return nil, nil, err
		}
		return s, cancel, nil
	}
	// The boot's first Hello, and its first verdict.
	live, liveCancel, err := open(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(live, verdict(1, "wipe")); err != nil {
		t.Fatalf("first session: %v", err)
	}

	const flood = 3000
	var accepted, refused int
	var conns []*grpc.ClientConn
	start := time.Now()
	for i := 1; i <= flood; i++ {
		if i%250 == 0 { // reconnect over a new TLS connection now and then
			conn = h.conn("", nil)
			conns = append(conns, conn)
		}
		s, cancel, err := open(i)
		if err != nil {
			t.Fatalf("re-Hello %d: %v", i, err)
		}
		// Like a runner after a reconnect, replay the unacked verdict: an
		// accepted session acks it (stored once), a refused one answers
		// ResourceExhausted.
		switch err := send(s, verdict(1, "wipe")); codeOf(err) {
		case codes.OK:
			accepted++
			liveCancel() // superseded by this one
			live, liveCancel = s, cancel
		case codes.ResourceExhausted:
			refused++
			cancel()
		default:
			t.Fatalf("re-Hello %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	t.Logf("%d re-Hellos of one boot in %s: %d accepted, %d refused", flood, elapsed.Round(time.Millisecond), accepted, refused)
	if accepted != burst-1 || refused != flood-accepted {
		t.Fatalf("accepted %d, refused %d: want the boot's burst (%d, less its first Hello) and the rest refused", accepted, refused, burst)
	}

	// The run still works: the session that got through takes a new verdict.
	if err := send(live, verdict(2, "sanitize")); err != nil {
		t.Fatalf("verdict after the flood: %v", err)
	}
	liveCancel()
	ctx := context.Background()
	if vs, err := h.st.Verdicts(ctx, nodeA.run); err != nil || len(vs) != 2 {
		t.Fatalf("verdicts of run A after the flood: %+v %v, want wipe and sanitize", vs, err)
	}

	// What the store keeps: the first connect, one reconnect summary, the
	// two verdicts; within the run's caps, and charged to them.
	evs, err := h.st.Events(ctx, nodeA.run, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var connects, summaries int
	var bytes int
	for _, e := range evs {
		bytes += len(e.Message) + len(e.Payload)
		switch {
		case strings.HasPrefix(e.Message, "runner connected from"):
			connects++
		case strings.HasPrefix(e.Message, fmt.Sprintf("runner reconnected %d times since", accepted)):
			summaries++
			if !e.Note || e.BootID != "boot1" {
				t.Errorf("reconnect summary is not boot1's note: %+v", e)
			}
		}
	}
	if connects != 1 || summaries != 1 || len(evs) > 8 || int64(len(evs)) > lim.MaxEvents || int64(bytes) > lim.MaxBytes {
		t.Fatalf("run A keeps %d events (%d bytes): %d connects, %d reconnect summaries; want 1 and 1 within caps %d/%d:\n%v",
			len(evs), bytes, connects, summaries, lim.MaxEvents, lim.MaxBytes, evs)
	}
	u, err := h.st.Usage(ctx, nodeA.run)
	if err != nil || u.Events != int64(accepted)+2 || u.Events > lim.MaxEvents {
		t.Fatalf("usage of run A: %+v %v, want the %d reconnects and 2 verdicts charged", u, err, accepted)
	}

	// What an operator reads: the report and the timeline, small.
	viewer := h.operatorClient("vic", pki.RoleViewer)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := viewer.Report(rctx, &curev1.ReportRequest{RunId: nodeA.run})
	if err != nil {
		t.Fatal(err)
	}
	if size := proto.Size(rep); size > 64<<10 || len(rep.GetVerdicts()) != 2 {
		t.Fatalf("report of run A: %d bytes, %d verdicts", size, len(rep.GetVerdicts()))
	}
	w, err := viewer.Watch(rctx, &curev1.WatchRequest{RunId: nodeA.run})
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for {
		_, err := w.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries++
	}
	if entries != len(evs) {
		t.Fatalf("watch of run A: %d entries, store holds %d", entries, len(evs))
	}

	// The boot counts once in the boot-stage histogram.
	if n := bootStageCount(t, h, "total"); n != 1 {
		t.Fatalf("cure_boot_stage_seconds{stage=total} counts %d boots, want 1", n)
	}
	// Its inventory is the first Hello's.
	inv, err := h.st.RunInventory(ctx, nodeA.run)
	if err != nil || !strings.Contains(string(inv.JSON), `"cpu-of-hello-0"`) || inv.BootID != "boot1" {
		t.Fatalf("inventory of run A: %s %v, want the first Hello's", inv.JSON, err)
	}
	// Refusals are security events, rate-limited; the log does not grow a
	// line per refusal.
	var reconnectRefusals int
	for _, a := range h.security(audit.RunnerSession) {
		if a.Actor == nodeA.id && strings.Contains(a.Detail, "reconnects faster than its budget") {
			reconnectRefusals++
		}
	}
	if most := 2 + int(elapsed/(10*time.Second)); reconnectRefusals == 0 || reconnectRefusals > most {
		t.Fatalf("%d security events for %d refused reconnects, want 1..%d", reconnectRefusals, refused, most)
	}
	if lines := strings.Count(h.logs.String(), "\n") - logsBefore; lines > 200 {
		t.Fatalf("the coordinator log grew %d lines over %d re-Hellos", lines, flood)
	}
	// The other node's run saw none of it.
	if evs, _ := h.st.Events(ctx, nodeB.run, 0, 0); len(evs) != 0 {
		t.Fatalf("run B has events: %v", evs)
	}
	if r := h.run(nodeA.run); r.Status != curev1.RunStatus_RUN_RUNNING {
		t.Fatalf("run A is %s after the flood", r.Status)
	}
	for _, c := range conns {
		c.Close()
	}
}

// bootStageCount is the sample count of cure_boot_stage_seconds{stage}.
func bootStageCount(t *testing.T, h *hostile, stage string) uint64 {
	t.Helper()
	mfs, err := h.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cure_boot_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// A run whose runner sent many large verdicts (the verdict cap allows 60 MiB
// of them) still has a report curectl can receive (gRPC's default 4 MiB):
// failures first, the rest counted.
func TestReportBoundedForClient(t *testing.T) {
	h := newHostile(t)
	tok := h.fetchToken(nodeA.mac)
	// A long deadline: 900 round trips take a while under the race detector.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := curev1.NewRunnerServiceClient(h.conn("", nil)).Session(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{Token: tok, BootId: "boot1", SessionSecret: strings.Repeat("s", 32),
		Identity: &curev1.Identity{BootMac: nodeA.mac, SystemSerial: nodeA.serial, NodeId: nodeA.id}}}}); err != nil {
		t.Fatal(err)
	}
	const total = 900
	big := strings.Repeat("x", 4096)
	for i := 1; i <= total; i++ {
		st := curev1.VerdictStatus_PASS
		if i%300 == 0 {
			st = curev1.VerdictStatus_FAIL
		}
		ev := &curev1.Event{Seq: uint64(i), Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: fmt.Sprintf("disk/nvme%dn1", i), Check: "wipe", Status: st, Observed: big[:1024], Expected: big[:1024], Message: big}}}
		if err := send(s, ev); err != nil {
			t.Fatalf("verdict %d: %v", i, err)
		}
	}
	ctx, cancelR := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelR()
	rep, err := h.operatorClient("vic", pki.RoleViewer).Report(ctx, &curev1.ReportRequest{RunId: nodeA.run})
	if err != nil {
		t.Fatalf("report of a run with %d verdicts of 6 KiB: %v", total, err)
	}
	fails := 0
	for _, v := range rep.GetVerdicts() {
		if v.GetStatus() == curev1.VerdictStatus_FAIL {
			fails++
		}
	}
	t.Logf("report: %d bytes, %d verdicts, %d omitted", proto.Size(rep), len(rep.GetVerdicts()), rep.GetVerdictsOmitted())
	if proto.Size(rep) > server.MaxReportBytes || rep.GetVerdictsOmitted() == 0 || len(rep.GetVerdicts())+int(rep.GetVerdictsOmitted()) != total || fails != 3 {
		t.Fatalf("report: %d bytes, %d verdicts (%d failures) + %d omitted; want at most %d bytes, all %d accounted, the 3 failures kept",
			proto.Size(rep), len(rep.GetVerdicts()), fails, rep.GetVerdictsOmitted(), server.MaxReportBytes, total)
	}
}
