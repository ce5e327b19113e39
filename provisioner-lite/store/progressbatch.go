package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// Progress batching. A runner's informational events (its metrics and logs,
// QueueRunnerEvent) and its heartbeats (QueueProgress) are answered at once
// and written later, one batch per run, in one transaction for every run
// with some pending: each second (ProgressFlushEvery), or sooner ahead of
// the run's next durable write. A durable event of a run (a phase start or
// end, a verdict, a pair exchange, anything AppendRunnerEvent keeps, and
// the coordinator's AppendEvent) first writes the run's pending events in
// its own transaction, so a run's timeline keeps the order of arrival in
// id order (the runner's seq order among its events), and whatever a reader learns
// from a durable event (a phase ended) comes with every event acked before
// it. Readers of a run's events (Events, MaxSeq, Usage, RunProgress) flush
// its pending first: an acked event is readable at once.
//
// What a coordinator crash loses: the events and heartbeat acked since the
// last flush, at most the last second (plus one commit) of each run's
// metrics and logs, never a state change: every event the pipeline or a
// resume reads is durable before its ack, as is every event of a boot that
// is not attested. The runner does not send those again (they were acked);
// a runner whose last events before the crash were such logs may say in
// its Hello a last seq above the store's. A clean Close flushes everything.

// ProgressFlushEvery is how long an acked progress event may wait for its
// write: the most a coordinator crash loses of each run's progress.
const ProgressFlushEvery = time.Second

// maxPendingProgress bounds the events held across runs: past it, events are
// written before their ack again (a store that cannot keep up slows the
// runners instead of growing the coordinator's memory).
const maxPendingProgress = 1 << 16

// maxEndedRuns bounds the memory of runs a flush found ended.
const maxEndedRuns = 4096

type pendingEvent struct {
	e        Event
	size     int64
	received int64 // ms: kept when the run ended after it
}

type pendingRun struct {
	events   []pendingEvent
	progress *ProgressRecord
	lim      EventLimits
}

// progressBuf holds the acked, not yet written progress of every run.
type progressBuf struct {
	mu    sync.Mutex
	runs  map[string]*pendingRun
	n     int                 // events held
	ended map[string]struct{} // runs a flush found ended: their next progress is refused

	inflight map[string]int // runs whose batch a transaction took and has not answered
	closed   bool           // the store is closing: nothing more is queued
	every    time.Duration  // ProgressFlushEvery; longer in tests that crash

	start, stopOnce sync.Once
	stop, stopped   chan struct{}
	started         atomic.Bool

	queued, flushes, flushed atomic.Int64
}

func newProgressBuf() *progressBuf {
	return &progressBuf{runs: map[string]*pendingRun{}, ended: map[string]struct{}{}, inflight: map[string]int{}, every: ProgressFlushEvery,
		stop: make(chan struct{}), stopped: make(chan struct{})}
}

// run returns runID's pending batch, created. Called with mu held.
func (b *progressBuf) run(runID string, lim EventLimits) *pendingRun {
	p := b.runs[runID]
	if p == nil {
		p = &pendingRun{}
		b.runs[runID] = p
	}
	p.lim = lim
	return p
}

// take removes and returns runID's pending batch ("": every run's). Run in
// the committer's goroutine only, so that batches are written in the order
// they were taken.
func (b *progressBuf) take(runID string) map[string]*pendingRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out map[string]*pendingRun
	if runID == "" {
		out, b.runs, b.n = b.runs, map[string]*pendingRun{}, 0
	} else if p := b.runs[runID]; p != nil {
		out = map[string]*pendingRun{runID: p}
		delete(b.runs, runID)
		b.n -= len(p.events)
	}
	for id := range out {
		b.inflight[id]++
	}
	return out
}

// answered ends the flight of taken batches.
func (b *progressBuf) answered(taken map[string]*pendingRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range taken {
		if b.inflight[id]--; b.inflight[id] <= 0 {
			delete(b.inflight, id)
		}
	}
}

// restore puts back batches whose transaction failed, ahead of what came
// since.
func (b *progressBuf) restore(taken map[string]*pendingRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, p := range taken {
		b.n += len(p.events)
		if cur := b.runs[id]; cur != nil {
			p.events = append(p.events, cur.events...)
			if cur.progress != nil {
				p.progress = cur.progress
			}
			p.lim = cur.lim
		}
		b.runs[id] = p
	}
}

// pending says whether a read of runID must flush first: the run has a
// batch waiting, or one a transaction is writing (the flush then waits for
// its commit, as the committer runs transactions in order).
func (b *progressBuf) pending(runID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.runs[runID]
	return ok || b.inflight[runID] > 0
}

// discard drops everything pending: what a crash does (tests).
func (b *progressBuf) discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runs, b.n = map[string]*pendingRun{}, 0
}

// shutdown stops the flusher after its last flush.
func (b *progressBuf) shutdown() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stopOnce.Do(func() { close(b.stop) })
	if b.started.Load() {
		<-b.stopped
	}
}

func (b *progressBuf) startFlusher(s *Store) {
	b.start.Do(func() {
		b.started.Store(true)
		go b.loop(s)
	})
}

func (b *progressBuf) loop(s *Store) {
	defer close(b.stopped)
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.stop:
			if err := s.FlushProgress(context.Background()); err != nil {
				slog.Error("store: last flush of runner progress", "err", err)
			}
			return
		}
		if err := s.FlushProgress(context.Background()); err != nil {
			slog.Error("store: flush runner progress", "err", err)
		}
	}
}

// QueueRunnerEvent keeps a runner's metric or log (e.Kind) of an active run
// like AppendRunnerEvent, but answers at once: the event is written within
// ProgressFlushEvery, with the run's other pending ones, or ahead of the
// run's next durable event (Queued). The caps are applied when it is
// written: one over them is counted dropped, and the run's first drop is
// noted on its timeline. A run a flush found ended refuses it
// (ErrRunInactive). When too much is pending it is written before the
// answer, as AppendRunnerEvent does.
func (s *Store) QueueRunnerEvent(ctx context.Context, e Event, lim EventLimits) (AppendResult, error) {
	if e.RunID == "" || e.Seq == 0 || e.Seq > math.MaxInt64 {
		return AppendResult{}, fmt.Errorf("store: queue runner event to run %q: seq %d: want a run and 1 <= seq <= 2^63-1", e.RunID, e.Seq)
	}
	if e.Kind != runstate.EventMetric && e.Kind != runstate.EventLog {
		return AppendResult{}, fmt.Errorf("store: queue runner %s event (seq %d) to run %s: only metrics and logs wait for their write", e.Kind, e.Seq, e.RunID)
	}
	e.Source, e.Note = runstate.SourceRunner, false
	b := s.gc.prog
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return AppendResult{}, fmt.Errorf("store: queue runner %s event (seq %d) to run %s: %w", e.Kind, e.Seq, e.RunID, ErrClosed)
	}
	if _, ended := b.ended[e.RunID]; ended {
		b.mu.Unlock()
		return AppendResult{}, fmt.Errorf("store: queue runner %s event (seq %d) to run %s: %w", e.Kind, e.Seq, e.RunID, ErrRunInactive)
	}
	if b.n >= maxPendingProgress {
		b.mu.Unlock()
		return s.AppendRunnerEvent(ctx, e, nil, lim)
	}
	p := b.run(e.RunID, lim)
	p.events = append(p.events, pendingEvent{e: e, size: int64(len(e.Message) + len(e.Payload) + len(e.Phase) + len(e.Status)), received: time.Now().UnixMilli()})
	b.n++
	b.mu.Unlock()
	b.queued.Add(1)
	b.startFlusher(s)
	return AppendResult{Queued: true}, nil
}

// QueueProgress keeps rec as its run's latest heartbeat like PutProgress,
// but answers at once: it is written within ProgressFlushEvery. A run a
// flush found ended refuses it (ErrRunInactive).
func (s *Store) QueueProgress(ctx context.Context, rec ProgressRecord) error {
	if rec.RunID == "" || rec.BootID == "" || rec.Seq == 0 || rec.Seq > math.MaxInt64 {
		return fmt.Errorf("store: progress of run %q boot %q seq %d: want a run, a boot and 1 <= seq <= 2^63-1", rec.RunID, rec.BootID, rec.Seq)
	}
	if rec.Received.IsZero() {
		rec.Received = time.Now()
	}
	b := s.gc.prog
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("store: progress of run %s (boot %q, seq %d): %w", rec.RunID, rec.BootID, rec.Seq, ErrClosed)
	}
	if _, ended := b.ended[rec.RunID]; ended {
		b.mu.Unlock()
		return fmt.Errorf("store: progress of run %s (boot %q, seq %d): %w", rec.RunID, rec.BootID, rec.Seq, ErrRunInactive)
	}
	p := b.run(rec.RunID, b.limOf(rec.RunID))
	if old := p.progress; old == nil || old.BootID != rec.BootID || old.Seq < rec.Seq {
		p.progress = &rec
	}
	b.mu.Unlock()
	b.queued.Add(1)
	b.startFlusher(s)
	return nil
}

// limOf is runID's pending limits (defaults when none). Called with mu held.
func (b *progressBuf) limOf(runID string) EventLimits {
	if p := b.runs[runID]; p != nil && p.lim != (EventLimits{}) {
		return p.lim
	}
	return DefaultEventLimits
}

// FlushProgress writes every run's pending progress now.
func (s *Store) FlushProgress(ctx context.Context) error { return s.flushProgress(ctx, "") }

// flushRun writes runID's pending progress, if any: a reader of the run's
// events calls it first.
func (s *Store) flushRun(ctx context.Context, runID string) error {
	if !s.gc.prog.pending(runID) {
		return nil
	}
	return s.flushProgress(ctx, runID)
}

func (s *Store) flushProgress(ctx context.Context, runID string) error {
	b := s.gc.prog
	if runID == "" {
		b.mu.Lock()
		empty := len(b.runs) == 0
		b.mu.Unlock()
		if empty {
			return nil
		}
	}
	var taken map[string]*pendingRun
	took := false
	written := map[string]bool{}
	err := s.tx(ctx, func(tx *Tx) error {
		if !took { // a rerun of the batch writes the same events
			taken, took = b.take(runID), true
		}
		clear(written)
		for id, p := range taken {
			n, err := s.writePending(ctx, tx, id, p)
			if err != nil {
				return fmt.Errorf("run %s: %w", id, err)
			}
			written[id] = n > 0
		}
		return nil
	})
	return s.settle(taken, written, err)
}

// settle answers a transaction that wrote taken batches: on failure they go
// back to the buffer; on success the runs' watchers hear of them.
func (s *Store) settle(taken map[string]*pendingRun, written map[string]bool, err error) error {
	b := s.gc.prog
	if len(taken) == 0 {
		return err
	}
	defer b.answered(taken)
	if err != nil {
		b.restore(taken)
		return fmt.Errorf("store: flush runner progress: %w", err)
	}
	b.flushes.Add(1)
	for id, p := range taken {
		b.flushed.Add(int64(len(p.events)))
		if written[id] {
			s.notify(id)
		}
	}
	return nil
}

// writePending writes one run's pending batch in tx: its events (those
// acked while the run was active, within its caps; replays skipped) and its
// heartbeat. It returns how many rows changed.
func (s *Store) writePending(ctx context.Context, tx *Tx, runID string, p *pendingRun) (int, error) {
	var status curev1.RunStatus
	var endedAt int64
	err := tx.QueryRowContext(ctx, `SELECT status, ended_at FROM runs WHERE id = ?`, runID).Scan(runStatusCol(&status), &endedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // a deleted run keeps nothing
	}
	if err != nil {
		return 0, err
	}
	active := runstate.Active(status)
	if !active {
		s.gc.prog.markEnded(runID)
	}
	var events, bytes, dropped int64
	if err := tx.QueryRowContext(ctx, `SELECT events, bytes, dropped FROM run_usage WHERE run_id = ?`, runID).Scan(&events, &bytes, &dropped); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	var addEvents, addBytes, addDropped int64
	changed := 0
	for _, pe := range p.events {
		if !active && (endedAt == 0 || pe.received > endedAt) {
			continue // sent after the run ended: refused, as before its ack
		}
		if events+addEvents+1 > p.lim.MaxEvents || bytes+addBytes+pe.size > p.lim.MaxBytes {
			if dropped+addDropped == 0 {
				if _, _, err := insertEvent(ctx, tx, capNote(pe.e, p.lim)); err != nil {
					return 0, err
				}
				changed++
			}
			addDropped++
			continue
		}
		_, inserted, err := insertEvent(ctx, tx, pe.e)
		if err != nil {
			return 0, err
		}
		if inserted {
			addEvents, addBytes = addEvents+1, addBytes+pe.size
			changed++
		}
	}
	if addEvents > 0 || addDropped > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_usage (run_id, events, bytes, dropped) VALUES (?, ?, ?, ?)
ON CONFLICT(run_id) DO UPDATE SET events = run_usage.events + excluded.events, bytes = run_usage.bytes + excluded.bytes, dropped = run_usage.dropped + excluded.dropped`,
			runID, addEvents, addBytes, addDropped); err != nil {
			return 0, err
		}
	}
	if rec := p.progress; rec != nil && active {
		n, err := putProgress(ctx, tx, *rec)
		if err != nil {
			return 0, err
		}
		changed += int(n)
	}
	return changed, nil
}

// capNote is the run's timeline entry for its first event over the caps.
func capNote(e Event, lim EventLimits) Event {
	return Event{RunID: e.RunID, NodeID: e.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(), Kind: runstate.EventInfo,
		Message: fmt.Sprintf("event cap reached (%d events or %d bytes): the runner's further metrics and logs are not stored", lim.MaxEvents, lim.MaxBytes)}
}

func (b *progressBuf) markEnded(runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ended) >= maxEndedRuns {
		clear(b.ended)
	}
	b.ended[runID] = struct{}{}
}

// flushAhead writes runID's pending batch in tx, ahead of a durable event of
// the run; *taken keeps what a first run of fn took for its reruns.
func (s *Store) flushAhead(ctx context.Context, tx *Tx, runID string, taken *map[string]*pendingRun, took *bool) error {
	if !*took {
		*taken, *took = s.gc.prog.take(runID), true
	}
	for id, p := range *taken {
		if _, err := s.writePending(ctx, tx, id, p); err != nil {
			return fmt.Errorf("pending progress: %w", err)
		}
	}
	return nil
}

// putProgress is PutProgress's write: rec replaces the run's heartbeat unless
// it is a replay of the same boot's.
func putProgress(ctx context.Context, tx *Tx, rec ProgressRecord) (int64, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO run_progress (run_id, boot_id, seq, phase, time, received, progress) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq, phase = excluded.phase, time = excluded.time,
	received = excluded.received, progress = excluded.progress
WHERE run_progress.boot_id <> excluded.boot_id OR run_progress.seq < excluded.seq`,
		rec.RunID, rec.BootID, int64(rec.Seq), string(rec.Phase), toMs(rec.Time), toMs(rec.Received), string(rec.JSON))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
