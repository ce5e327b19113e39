package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
)

// coordinator is a fake RunnerService that stores events by seq the way a
// real store would (idempotent on seq), acks what it stored, and cuts the
// first stream after storing cutAfter events, leaving the last two unacked.
type coordinator struct {
	curev1.UnimplementedRunnerServiceServer
	t        *testing.T
	cutAfter uint64
	// gaps: seqs may skip (the runner dropped metric samples); stored is
	// then in arrival order rather than indexed by seq.
	gaps bool

	mu       sync.Mutex
	hellos   []*curev1.Hello
	stored   []*curev1.Event // index i holds seq i+1
	dups     int             // events received again after being stored
	wireSeqs [][]uint64      // per connection, seqs as received
	problems []string
	toSend   chan *curev1.CoordinatorMessage
}

func (c *coordinator) Session(stream grpc.BidiStreamingServer[curev1.RunnerMessage, curev1.CoordinatorMessage]) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	c.mu.Lock()
	if m.GetHello() == nil {
		c.problems = append(c.problems, fmt.Sprintf("first message is %T, want Hello", m.Msg))
	}
	c.hellos = append(c.hellos, m.GetHello())
	conn := len(c.hellos)
	c.wireSeqs = append(c.wireSeqs, nil)
	c.mu.Unlock()
	if err := stream.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Idle{Idle: &curev1.Idle{Reason: "nothing yet"}}}); err != nil {
		return err
	}
	go func() {
		for msg := range c.toSend {
			if stream.Send(msg) != nil {
				return
			}
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		ev := m.GetEvent()
		if ev == nil {
			c.mu.Lock()
			c.problems = append(c.problems, fmt.Sprintf("conn %d: non-event message %T after Hello", conn, m.Msg))
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		c.wireSeqs[conn-1] = append(c.wireSeqs[conn-1], ev.Seq)
		next := uint64(len(c.stored)) + 1
		if c.gaps && len(c.stored) > 0 {
			next = c.stored[len(c.stored)-1].Seq + 1
		}
		switch {
		case c.gaps && ev.Seq > next:
			c.stored = append(c.stored, ev)
		case ev.Seq < next:
			c.dups++
		case ev.Seq > next:
			c.problems = append(c.problems, fmt.Sprintf("conn %d: gap: got seq %d, want %d", conn, ev.Seq, next))
		default:
			c.stored = append(c.stored, ev)
		}
		n := uint64(len(c.stored))
		if c.gaps {
			n = c.stored[len(c.stored)-1].Seq
		}
		c.mu.Unlock()
		if conn == 1 && n >= c.cutAfter {
			return errors.New("simulated coordinator crash")
		}
		if conn == 1 && n > c.cutAfter-2 {
			continue // stored, ack lost with the crash
		}
		if err := stream.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: n}}}); err != nil {
			return err
		}
	}
}

func setup(t *testing.T, c *coordinator) *grpc.ClientConn {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	curev1.RegisterRunnerServiceServer(srv, c)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Mid-phase or done with its phases, a runner's re-Hello carries the last
// seq it emitted: the coordinator tells from it whether the runner is still
// replaying (follow it) or needs new work.
func TestSessionReplaysUnackedAfterCut(t *testing.T) {
	for _, kind := range []curev1.RunnerState_Kind{curev1.RunnerState_IN_PHASE, curev1.RunnerState_DONE} {
		t.Run(kind.String(), func(t *testing.T) { testReplaysUnackedAfterCut(t, kind) })
	}
}

func testReplaysUnackedAfterCut(t *testing.T, kind curev1.RunnerState_Kind) {
	c := &coordinator{t: t, cutAfter: 5, toSend: make(chan *curev1.CoordinatorMessage)}
	conn := setup(t, c)
	hello := func() *curev1.Hello {
		return &curev1.Hello{Token: "tok", BootId: "b1", State: &curev1.RunnerState{Kind: kind, RunId: "r1", Phase: "nvme"}}
	}
	s := NewSession(conn, hello, SessionOptions{BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Log: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	const total = 12
	for i := 1; i <= total; i++ {
		s.Emit(&curev1.Event{RunId: "r1", Phase: "nvme", Body: &curev1.Event_Log{Log: &curev1.Log{Message: fmt.Sprintf("event %d", i)}}})
		time.Sleep(2 * time.Millisecond)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := s.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		t.Error(p)
	}
	if len(c.stored) != total {
		t.Fatalf("coordinator stored %d events, want %d", len(c.stored), total)
	}
	for i, ev := range c.stored {
		if want := fmt.Sprintf("event %d", i+1); ev.Seq != uint64(i+1) || ev.GetLog().GetMessage() != want {
			t.Errorf("stored[%d] = seq %d %q, want seq %d %q", i, ev.Seq, ev.GetLog().GetMessage(), i+1, want)
		}
	}
	if len(c.hellos) < 2 {
		t.Fatalf("hellos = %d, want a reconnect", len(c.hellos))
	}
	// The events stored but not acked before the cut come again, first
	// thing after the new Hello: the store's idempotence absorbs them.
	second := c.wireSeqs[1]
	if len(second) == 0 || second[0] != 4 {
		t.Errorf("second connection starts at seq %v, want 4 (oldest unacked)", second)
	}
	for conn, seqs := range c.wireSeqs {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				t.Errorf("conn %d: seqs not monotonic: %v", conn+1, seqs)
			}
		}
	}
	if c.dups != 2 {
		t.Errorf("re-sent stored events = %d, want exactly the 2 unacked ones", c.dups)
	}
	if st := c.hellos[1].GetState(); st.GetLastEventSeq() < 5 || st.GetRunId() != "r1" || st.GetKind() != kind {
		t.Errorf("re-Hello state = %v, want %s r1 with last_event_seq >= 5", st, kind)
	}
	// The reconnect proves it is the same boot with the same session secret.
	if sec := c.hellos[0].GetSessionSecret(); len(sec) != 64 || c.hellos[1].GetSessionSecret() != sec {
		t.Errorf("session secrets %q then %q, want one 64-hex secret on every Hello", sec, c.hellos[1].GetSessionSecret())
	}
	if other := NewSession(nil, nil, SessionOptions{}); other.secret == s.secret {
		t.Error("two sessions share a secret")
	}
	if s.Pending() != 0 {
		t.Errorf("Pending = %d after drain", s.Pending())
	}
}

func TestSessionDeliversDirectivesAndDrainTimesOut(t *testing.T) {
	c := &coordinator{t: t, cutAfter: 1 << 62, toSend: make(chan *curev1.CoordinatorMessage, 1)}
	conn := setup(t, c)
	s := NewSession(conn, func() *curev1.Hello { return &curev1.Hello{} }, SessionOptions{Log: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)

	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	defer ncancel()
	d, err := s.Next(nctx)
	if err != nil || d.Idle == nil || d.Idle.Reason != "nothing yet" {
		t.Fatalf("first directive = %+v, %v; want Idle", d, err)
	}
	c.toSend <- &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Assignment{Assignment: &curev1.Assignment{RunId: "r7", Phases: []string{"nvme"}}}}
	d, err = s.Next(nctx)
	if err != nil || d.Assignment.GetRunId() != "r7" {
		t.Fatalf("second directive = %+v, %v; want Assignment r7", d, err)
	}

	// An event never acked: Drain must give up when its context does, saying so.
	s2 := NewSession(conn, func() *curev1.Hello { return &curev1.Hello{} }, SessionOptions{Log: quiet()})
	s2.Emit(&curev1.Event{})
	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer tcancel()
	if err := s2.Drain(tctx); err == nil {
		t.Fatal("Drain with an unacked event and no connection returned nil")
	}
}

func TestBackoffBounded(t *testing.T) {
	p := reconnect(500*time.Millisecond, 30*time.Second)
	for attempt := 1; attempt < 40; attempt++ {
		d := p.Delay(attempt)
		if d < 250*time.Millisecond || d > 30*time.Second {
			t.Fatalf("reconnect delay (attempt %d) = %v out of bounds", attempt, d)
		}
	}
	if d := reconnect(time.Second, time.Minute).Delay(1); d > time.Second || d < time.Second/2 {
		t.Fatalf("first reconnect delay %v outside [base/2, base]", d)
	}
}

// With the coordinator away, metric samples beyond the cap are dropped
// oldest first; verdicts and logs never are, and the replay after the
// reconnect delivers the survivors in seq order.
func TestSessionCapsQueuedMetrics(t *testing.T) {
	c := &coordinator{t: t, cutAfter: 1 << 30, gaps: true, toSend: make(chan *curev1.CoordinatorMessage)}
	conn := setup(t, c)
	hello := func() *curev1.Hello { return &curev1.Hello{Token: "tok", BootId: "b1"} }
	s := NewSession(conn, hello, SessionOptions{MaxUnackedMetrics: 10, Log: quiet()})
	metric := func(i int) *curev1.Event {
		return &curev1.Event{RunId: "r1", Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "gpu.temp", Value: float64(i)}}}
	}
	for i := 1; i <= 100; i++ {
		s.Emit(metric(i))
		if i%25 == 0 {
			s.Emit(&curev1.Event{RunId: "r1", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: fmt.Sprintf("gpu/%d", i/25)}}})
		}
	}
	if s.Pending() != 14 || s.Dropped() != 90 {
		t.Fatalf("queued %d, dropped %d; want 4 verdicts + 10 samples queued, 90 dropped", s.Pending(), s.Dropped())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := s.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		t.Error(p)
	}
	var verdicts, samples []string
	for i, ev := range c.stored {
		if i > 0 && ev.Seq <= c.stored[i-1].Seq {
			t.Errorf("stored out of seq order: %d after %d", ev.Seq, c.stored[i-1].Seq)
		}
		if v := ev.GetVerdict(); v != nil {
			verdicts = append(verdicts, v.Component)
		} else {
			samples = append(samples, fmt.Sprint(ev.GetMetric().GetValue()))
		}
	}
	if fmt.Sprint(verdicts) != "[gpu/1 gpu/2 gpu/3 gpu/4]" {
		t.Errorf("verdicts delivered %v", verdicts)
	}
	if fmt.Sprint(samples) != "[91 92 93 94 95 96 97 98 99 100]" {
		t.Errorf("samples delivered %v, want the newest 10", samples)
	}
}

// TestSessionKeepsLatestProgress: heartbeats queued while the coordinator
// is away are superseded by the newest; verdicts and logs between them stay.
func TestSessionKeepsLatestProgress(t *testing.T) {
	s := NewSession(nil, nil, SessionOptions{Log: quiet()})
	progress := func(ms int64) *curev1.Event {
		return &curev1.Event{RunId: "r1", Body: &curev1.Event_Progress{Progress: &curev1.Progress{Suite: "soak", ElapsedMs: ms}}}
	}
	for i := int64(1); i <= 60; i++ {
		s.Emit(progress(i * 60000))
		if i%20 == 0 {
			s.Emit(&curev1.Event{RunId: "r1", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: fmt.Sprintf("cpu/%d", i/20)}}})
		}
	}
	s.Emit(progress(3700000))
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []string
	for i, ev := range s.unacked {
		if i > 0 && ev.Seq <= s.unacked[i-1].Seq {
			t.Errorf("queue out of seq order: %d after %d", ev.Seq, s.unacked[i-1].Seq)
		}
		if p := ev.GetProgress(); p != nil {
			got = append(got, fmt.Sprint("progress ", p.ElapsedMs))
		} else {
			got = append(got, ev.GetVerdict().GetComponent())
		}
	}
	if fmt.Sprint(got) != "[cpu/1 cpu/2 cpu/3 progress 3700000]" {
		t.Errorf("queued %v, want the verdicts and the newest heartbeat", got)
	}
}

// Bytes from hardware that are not UTF-8 would make proto3 refuse the whole
// message: the session repairs them instead of failing forever.
func TestInvalidUTF8Repaired(t *testing.T) {
	ev := &curev1.Event{Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/sda", Check: "wipe", Observed: "serial S\xff1"}}}
	if _, err := proto.Marshal(ev); err == nil {
		t.Fatal("proto3 marshalled invalid UTF-8: this test proves nothing")
	}
	s := NewSession(nil, nil, SessionOptions{Log: quiet()})
	s.Emit(ev)
	if _, err := proto.Marshal(ev); err != nil || ev.GetVerdict().GetObserved() != "serial S\uFFFD1" {
		t.Fatalf("after Emit: %q %v", ev.GetVerdict().GetObserved(), err)
	}
	h := &curev1.Hello{Inventory: &curev1.Inventory{Disks: []*curev1.BlockDevice{{Serial: "\xfe\xff"}}}, Identity: &curev1.Identity{Macs: []string{"a\xff"}}}
	l := &curev1.Log{Attrs: map[string]string{"k\xff": "v\xff"}}
	validUTF8(h)
	validUTF8(l)
	for _, m := range []proto.Message{h, l} {
		if _, err := proto.Marshal(m); err != nil {
			t.Fatalf("%T still invalid: %v", m, err)
		}
	}
}

// TestSessionCapsQueuedSamples: telemetry batches queued while the
// coordinator is away are capped, the oldest dropped; verdicts stay.
func TestSessionCapsQueuedSamples(t *testing.T) {
	s := NewSession(nil, nil, SessionOptions{Log: quiet(), MaxUnackedSamples: 3})
	batch := func(i int) *curev1.Event {
		return &curev1.Event{RunId: "r1", Body: &curev1.Event_Samples{Samples: &curev1.Samples{Series: []*curev1.Series{
			{Component: "cpu/0", Metric: "busy_pct", Source: "host", TimeUnixMs: []int64{int64(i)}, Values: []float64{50}}}}}}
	}
	for i := 1; i <= 10; i++ {
		s.Emit(batch(i))
		if i == 2 {
			s.Emit(&curev1.Event{RunId: "r1", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "gpu/0"}}})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []string
	for _, ev := range s.unacked {
		if b := ev.GetSamples(); b != nil {
			got = append(got, fmt.Sprint(b.GetSeries()[0].GetTimeUnixMs()[0]))
		} else {
			got = append(got, ev.GetVerdict().GetComponent())
		}
	}
	if fmt.Sprint(got) != "[gpu/0 8 9 10]" || s.droppedSamples != 7 {
		t.Errorf("queued %v (%d dropped), want the verdict and the newest 3 batches", got, s.droppedSamples)
	}
}
