package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

func progressEvent(run string, seq uint64, kind runstate.EventKind) Event {
	return Event{RunID: run, NodeID: "n1", BootID: "b1", Seq: seq, Time: time.Now().UTC(), Phase: "nvme", Kind: kind, Message: fmt.Sprintf("%s %d", kind, seq)}
}

// A crash loses the progress acked since the last flush and nothing else:
// the metrics and logs before a phase end are written with it, in seq
// order; those after it, and the heartbeat, are gone after the crash; a
// runner's replay of what survived adds nothing.
func TestProgressCrashLosesOnlyUnflushedProgress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cure.db")
	s, err := Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	s.gc.prog.every = time.Hour // no flush but the phase end's
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	queue := func(seq uint64, kind runstate.EventKind) {
		t.Helper()
		if res, err := s.QueueRunnerEvent(ctx, progressEvent("r1", seq, kind), DefaultEventLimits); err != nil || !res.Queued {
			t.Fatalf("queue seq %d: %+v %v", seq, res, err)
		}
	}
	heartbeat := func(seq uint64) {
		t.Helper()
		if err := s.QueueProgress(ctx, ProgressRecord{RunID: "r1", BootID: "b1", Seq: seq, Phase: "nvme", Time: time.Now(), JSON: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	queue(1, runstate.EventLog)
	queue(2, runstate.EventMetric)
	heartbeat(3)
	queue(4, runstate.EventLog)
	end := progressEvent("r1", 5, runstate.EventPhaseEnd)
	end.Status = "ok"
	if res, err := s.AppendRunnerEvent(ctx, end, nil, DefaultEventLimits); err != nil || !res.Inserted {
		t.Fatalf("phase end: %+v %v", res, err)
	}
	queue(6, runstate.EventLog)
	heartbeat(7)
	queue(8, runstate.EventMetric)
	s.gc.prog.discard() // the crash: what was pending is gone
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i, e := range evs {
		seqs = append(seqs, e.Seq)
		if i > 0 && (e.ID <= evs[i-1].ID || e.Seq <= evs[i-1].Seq) {
			t.Fatalf("events out of order: %+v", evs)
		}
	}
	if fmt.Sprint(seqs) != "[1 2 4 5]" || evs[3].Kind != runstate.EventPhaseEnd {
		t.Fatalf("after the crash the store holds seqs %v, want [1 2 4 5] (the phase end and the progress before it)", seqs)
	}
	if m, err := s.MaxSeq(ctx, "r1", "b1"); err != nil || m != 5 {
		t.Fatalf("max seq %d %v, want 5", m, err)
	}
	if p, err := s.RunProgress(ctx, "r1"); err != nil || p.Seq != 3 {
		t.Fatalf("heartbeat after the crash: seq %d %v, want 3 (written with the phase end)", p.Seq, err)
	}
	if u, _ := s.Usage(ctx, "r1"); u.Events != 4 {
		t.Fatalf("usage %+v, want 4 events", u)
	}
	// The runner replays what it had not seen acked: nothing doubles.
	if res, err := s.AppendRunnerEvent(ctx, end, nil, DefaultEventLimits); err != nil || res.Inserted {
		t.Fatalf("phase end replayed: %+v %v", res, err)
	}
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 4, runstate.EventLog), DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.Events(ctx, "r1", 0, 0); len(evs) != 4 {
		t.Fatalf("%d events after replays, want 4", len(evs))
	}
}

// A progress event is answered while the committer is busy: its answer
// waits on no commit, where a durable event's does.
func TestProgressAckWaitsOnNoCommit(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	runningRun(t, s, "r2")
	hold, held := make(chan struct{}), make(chan struct{})
	go s.tx(context.Background(), func(*Tx) error { close(held); <-hold; return nil }) //nolint:errcheck // holds the committer
	<-held
	commits := s.Stats().Commits
	durable := make(chan error, 1)
	go func() {
		_, err := s.AppendRunnerEvent(ctx, progressEvent("r2", 1, runstate.EventPhaseStart), nil, DefaultEventLimits)
		durable <- err
	}()
	for seq := uint64(2); seq <= 101; seq++ {
		if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", seq, runstate.EventMetric), DefaultEventLimits); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.QueueProgress(ctx, ProgressRecord{RunID: "r1", BootID: "b1", Seq: 102, JSON: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-durable:
		t.Fatalf("a durable event was answered while the committer was held (%v)", err)
	default:
	}
	if c := s.Stats().Commits; c != commits {
		t.Fatalf("%d commits while the committer was held", c-commits)
	}
	close(hold)
	if err := <-durable; err != nil {
		t.Fatal(err)
	}
	if err := s.FlushProgress(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _ := s.Events(ctx, "r1", 0, 0)
	st := s.Stats()
	if len(evs) != 100 || st.ProgressQueued != 101 || st.ProgressFlushed != 100 {
		t.Fatalf("%d events stored, stats %+v: want 100 metrics, 101 queued (with the heartbeat), 100 flushed", len(evs), st)
	}
}

// Queued events meet the run's caps and its end when written: past the
// caps they are counted dropped and the first drop is noted; a run that
// ended refuses what came after its end, and then any more.
func TestProgressCapsAndEnd(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	lim := EventLimits{MaxEvents: 3, MaxBytes: 1 << 20, HardEvents: 10, MaxVerdicts: 10}
	for seq := uint64(1); seq <= 5; seq++ {
		if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", seq, runstate.EventLog), lim); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.Usage(ctx, "r1") // a read flushes first
	if err != nil || u.Events != 3 || u.Dropped != 2 {
		t.Fatalf("usage %+v %v: want 3 events, 2 dropped", u, err)
	}
	evs, _ := s.Events(ctx, "r1", 0, 0)
	if len(evs) != 4 || evs[3].Source != runstate.SourceCoordinator {
		t.Fatalf("timeline %+v: want 3 logs and one cap note", evs)
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().Add(-time.Minute)
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 6, runstate.EventLog), DefaultEventLimits); err != nil {
		t.Fatal(err) // not known ended yet: answered, refused when written
	}
	if err := s.FlushProgress(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.Events(ctx, "r1", 0, 0); len(evs) != 4 {
		t.Fatalf("%d events: an event sent after the run's end was kept", len(evs))
	}
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 7, runstate.EventLog), DefaultEventLimits); !errors.Is(err, ErrRunInactive) {
		t.Fatalf("queue to an ended run: %v, want ErrRunInactive", err)
	}
}

// BenchmarkAppendProgress compares a runner metric written before its ack
// (durable, one group commit each) with one queued (batched, one write per
// run per second): commits and CPU per event, 64 runs appending at once.
func BenchmarkAppendProgress(b *testing.B) {
	for _, mode := range []string{"durable", "batched"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "cure.db"), WithStateKey(testKey))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			const runs = 64
			for i := range runs {
				n := testNode(fmt.Sprintf("n%d", i), fmt.Sprintf("52:54:00:00:01:%02x", i))
				if err := s.UpsertNode(ctx, n); err != nil {
					b.Fatal(err)
				}
				if err := s.CreateRun(ctx, Run{ID: fmt.Sprintf("r%d", i), NodeID: n.ID, Status: curev1.RunStatus_RUN_RUNNING}); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			commits := s.Stats().Commits
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.SetParallelism(runs / 2)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1) - 1
				e := Event{RunID: fmt.Sprintf("r%d", g%runs), NodeID: fmt.Sprintf("n%d", g%runs), BootID: fmt.Sprintf("b%d", g), Phase: "burnin",
					Kind: runstate.EventMetric, Message: "gpu0_temp=61C"}
				for pb.Next() {
					e.Seq++
					e.Time = time.Now()
					var err error
					if mode == "durable" {
						_, err = s.AppendRunnerEvent(ctx, e, nil, DefaultEventLimits)
					} else {
						_, err = s.QueueRunnerEvent(ctx, e, DefaultEventLimits)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			if err := s.FlushProgress(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(s.Stats().Commits-commits)/float64(b.N), "commits/event")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/event")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A clean Close writes what is queued; after it nothing more is queued.
func TestProgressCloseFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cure.db")
	s, err := Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	s.gc.prog.every = time.Hour
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", seq, runstate.EventLog), DefaultEventLimits); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.QueueProgress(ctx, ProgressRecord{RunID: "r1", BootID: "b1", Seq: 4, JSON: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 5, runstate.EventLog), DefaultEventLimits); !errors.Is(err, ErrClosed) {
		t.Fatalf("queue on a closed store: %v, want ErrClosed", err)
	}
	s, err = Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if evs, _ := s.Events(ctx, "r1", 0, 0); len(evs) != 3 {
		t.Fatalf("%d events after a clean close, want 3", len(evs))
	}
	if p, err := s.RunProgress(ctx, "r1"); err != nil || p.Seq != 4 {
		t.Fatalf("heartbeat after a clean close: %+v %v", p, err)
	}
}

// Runs appending at once, each its events in order (as a session does),
// queued and durable mixed, flushed often, read meanwhile: every run's
// events are stored once each, in seq order by id.
func TestProgressOrderUnderConcurrency(t *testing.T) {
	s, _ := openTest(t)
	s.gc.prog.every = 5 * time.Millisecond
	ctx := ctxT(t)
	const runs, per = 6, 150
	for i := range runs {
		n := testNode(fmt.Sprintf("n%d", i), fmt.Sprintf("52:54:00:00:02:%02x", i))
		mustNode(t, s, n)
		if err := s.CreateRun(ctx, Run{ID: fmt.Sprintf("r%d", i), NodeID: n.ID, Status: curev1.RunStatus_RUN_RUNNING}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, runs)
	for i := range runs {
		go func() {
			run := fmt.Sprintf("r%d", i)
			for seq := uint64(1); seq <= per; seq++ {
				var err error
				if seq%10 == 0 {
					_, err = s.AppendRunnerEvent(ctx, progressEvent(run, seq, runstate.EventPhaseStart), nil, DefaultEventLimits)
				} else {
					_, err = s.QueueRunnerEvent(ctx, progressEvent(run, seq, runstate.EventMetric), DefaultEventLimits)
				}
				if err == nil && seq%25 == 0 {
					_, err = s.Events(ctx, run, 0, 0)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs {
		evs, err := s.Events(ctx, fmt.Sprintf("r%d", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != per {
			t.Fatalf("run r%d: %d events, want %d", i, len(evs), per)
		}
		for j, e := range evs {
			if e.Seq != uint64(j+1) {
				t.Fatalf("run r%d: event %d (id %d) has seq %d: ids out of seq order", i, j, e.ID, e.Seq)
			}
		}
	}
}

// A coordinator event of the run is written after the runner's progress
// acked before it: the timeline's ids keep the order of arrival.
func TestProgressCoordinatorEventKeepsArrivalOrder(t *testing.T) {
	s, _ := openTest(t)
	s.gc.prog.every = time.Hour
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 1, runstate.EventLog), DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", NodeID: "n1", Source: runstate.SourceCoordinator, Time: time.Now(), Kind: runstate.EventInfo, Message: "coordinator"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueueRunnerEvent(ctx, progressEvent("r1", 2, runstate.EventLog), DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s/%d", e.Source, e.Seq))
	}
	if fmt.Sprint(got) != "[runner/1 coordinator/0 runner/2]" {
		t.Fatalf("timeline %v, want the order of arrival", got)
	}
}
