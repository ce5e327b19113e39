package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit. Every write of the coordinator is a small transaction, and
// with synchronous=FULL each commit is an fsync: one transaction per write
// capped a coordinator at a few hundred writes a second, whatever the number
// of runs. The committer instead takes every write queued while the previous
// commit was under way and commits them together in one transaction; a write
// that fails is answered alone and the batch runs again without it. Callers
// still return only once their write is durable.

// Tx is a write transaction as fn sees it. Its methods take a context for the
// shape of database/sql but run under the batch's own: one caller giving up
// must not interrupt a transaction that carries other callers' writes.
type Tx struct {
	tx    *sql.Tx
	ctx   context.Context
	p     *pool
	after []func()
	// runRows are the run rows this transaction wrote, by id: UpdateRun's
	// diff for a run written earlier in the same batch (the cache moves
	// only after the commit).
	runRows map[string]cachedRow
}

// AfterCommit runs f once the transaction carrying this write committed,
// never when it is rolled back. A cache of what the database holds must be
// updated here, not in fn: a batch rolled back for another write's failure
// runs again, and a cache updated by the first attempt would describe a row
// that was never written (UpdateRun then found nothing to change and lost
// the write: TestUpdateRunSurvivesBatchRetry).
func (t *Tx) AfterCommit(f func()) { t.after = append(t.after, f) }

// ExecContext runs a statement in the transaction (prepared once per store).
func (t *Tx) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.p.stmt(t.ctx, q)
	if err != nil {
		return nil, err
	}
	return t.tx.StmtContext(t.ctx, st).ExecContext(t.ctx, args...)
}

// QueryRowContext runs a query returning at most one row.
func (t *Tx) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	st, err := t.p.stmt(t.ctx, q)
	if err != nil {
		// *sql.Row carries its error to Scan only from database/sql itself:
		// fall back to the unprepared path, which reports the same error.
		return t.tx.QueryRowContext(t.ctx, t.p.rebind(q), args...)
	}
	return t.tx.StmtContext(t.ctx, st).QueryRowContext(t.ctx, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.p.stmt(t.ctx, q)
	if err != nil {
		return nil, err
	}
	return t.tx.StmtContext(t.ctx, st).QueryContext(t.ctx, args...)
}

// pool caches prepared statements of a *sql.DB by query text.
type pool struct {
	db     *sql.DB
	rebind func(string) string
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
}

func newPool(db *sql.DB) *pool {
	return &pool{db: db, rebind: func(q string) string { return q }, stmts: map[string]*sql.Stmt{}}
}

// maxCachedStmts bounds the cache: queries are constants of this package
// plus the column combinations of UpdateRun, far below it.
const maxCachedStmts = 512

func (p *pool) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	p.mu.Lock()
	st, ok := p.stmts[q]
	p.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := p.db.PrepareContext(context.WithoutCancel(ctx), p.rebind(q))
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.stmts[q]; ok {
		st.Close()
		return old, nil
	}
	if len(p.stmts) >= maxCachedStmts {
		return st, nil // used once; database/sql closes nothing here, so neither do we cache it
	}
	p.stmts[q] = st
	return st, nil
}

func (p *pool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (p *pool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := p.stmt(ctx, q)
	if err != nil {
		return p.db.QueryRowContext(ctx, p.rebind(q), args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (p *pool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := p.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (p *pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, st := range p.stmts {
		errs = append(errs, st.Close())
	}
	p.stmts = map[string]*sql.Stmt{}
	return errors.Join(errs...)
}

// op is one caller's write.
type op struct {
	ctx  context.Context
	fn   func(*Tx) error
	done chan error
}

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("store closed")

// batchTimeout bounds one group transaction.
const batchTimeout = 2 * time.Minute

type committer struct {
	db       *sql.DB
	p        *pool
	maxBatch int
	ops      chan *op
	quit     chan struct{}
	stopped  chan struct{}
	once     sync.Once
	prog     *progressBuf // acked runner progress waiting for its write (progressbatch.go)

	commits, ops_, batchedOps, failedCommits atomic.Int64
	commitNanos, maxBatchSeen                atomic.Int64

	// observe, if set, is told each committed transaction's duration and
	// write count (metrics); it must not block.
	observe atomic.Pointer[func(d time.Duration, writes int)]
}

func newCommitter(db *sql.DB, p *pool, maxBatch int) *committer {
	c := &committer{db: db, p: p, maxBatch: maxBatch, ops: make(chan *op, 4096), quit: make(chan struct{}), stopped: make(chan struct{}),
		prog: newProgressBuf()}
	go c.loop()
	return c
}

func (c *committer) do(ctx context.Context, fn func(*Tx) error) error {
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case c.ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.quit:
		return ErrClosed
	}
	// Once queued, the outcome is awaited whatever ctx does: the write may
	// commit, and the caller must not believe otherwise.
	return <-o.done
}

// doUntil is do for a write whose caller may stop waiting when ctx ends:
// the write may still commit afterwards. For idempotent writes only (a
// lease renewal), whose caller must act on time rather than on the outcome.
func (c *committer) doUntil(ctx context.Context, fn func(*Tx) error) error {
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case c.ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.quit:
		return ErrClosed
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("outcome unknown: %w", ctx.Err())
	}
}

func (c *committer) close() {
	c.prog.shutdown() // its last flush needs the committer
	c.once.Do(func() { close(c.quit) })
	<-c.stopped
}

func (c *committer) loop() {
	defer close(c.stopped)
	batch := make([]*op, 0, c.maxBatch)
	for {
		select {
		case o := <-c.ops:
			batch = append(batch[:0], o)
		case <-c.quit:
			for {
				select {
				case o := <-c.ops:
					o.done <- ErrClosed
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < c.maxBatch {
			select {
			case o := <-c.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		c.run(batch)
	}
}

// run commits one batch and answers each caller. The batch runs as one
// plain transaction: savepoints per write would have SQLite journal every
// page each write touches (most of the committer's CPU under fleet load).
// Writes rarely fail inside the transaction (inputs are checked before);
// when one does, the batch is rolled back, that write is answered with its
// error (it met the same state it would meet alone, the writes before it
// in the same order) and the batch runs again without it.
func (c *committer) run(batch []*op) {
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.done <- err // gave up while queued: never ran
			continue
		}
		live = append(live, o)
	}
	for len(live) > 0 {
		failed, opErr, err := c.commit(live)
		if err != nil {
			c.failedCommits.Add(1)
			for _, o := range live {
				o.done <- err
			}
			return
		}
		if failed < 0 {
			for _, o := range live {
				o.done <- nil
			}
			return
		}
		live[failed].done <- opErr
		live = append(live[:failed:failed], live[failed+1:]...)
	}
}

// commit runs ops in one transaction. It stops at the first failing write,
// rolls back and returns its index and error; failed is -1 when every write
// committed.
func (c *committer) commit(ops []*op) (failed int, opErr, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	start := time.Now()
	defer func() { c.commitNanos.Add(int64(time.Since(start))) }()
	t, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return -1, nil, fmt.Errorf("begin: %w", err)
	}
	tx := &Tx{tx: t, ctx: ctx, p: c.p}
	for i, o := range ops {
		if ferr := call(o.fn, tx); ferr != nil {
			t.Rollback()
			return i, ferr, nil
		}
	}
	if err := t.Commit(); err != nil {
		return -1, nil, fmt.Errorf("commit: %w", err)
	}
	for _, f := range tx.after {
		f()
	}
	c.commits.Add(1)
	if f := c.observe.Load(); f != nil {
		(*f)(time.Since(start), len(ops))
	}
	c.ops_.Add(int64(len(ops)))
	if len(ops) > 1 {
		c.batchedOps.Add(int64(len(ops)))
	}
	for {
		m := c.maxBatchSeen.Load()
		if int64(len(ops)) <= m || c.maxBatchSeen.CompareAndSwap(m, int64(len(ops))) {
			break
		}
	}
	return -1, nil, nil
}

// call runs fn, turning a panic into that write's error so a bug in one
// write cannot take the committer (and every other write) down.
func call(fn func(*Tx) error, tx *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store write panicked: %v", r)
		}
	}()
	return fn(tx)
}

// Stats are the store's write counters since Open.
type Stats struct {
	Commits       int64         // transactions committed
	Ops           int64         // writes committed (several per commit under load); failed ones not counted
	BatchedOps    int64         // writes that shared their commit with others
	FailedCommits int64         // group transactions that failed as a whole
	MaxBatch      int64         // most writes in one commit
	CommitTime    time.Duration // total time from BEGIN to COMMIT done
	// Runner progress answered before its write (progressbatch.go).
	ProgressQueued  int64 // metrics, logs and heartbeats queued
	ProgressFlushes int64 // transactions that wrote queued progress
	ProgressFlushed int64 // metrics and logs written by them (replays and drops included)
}

// Stats returns the write counters.
func (s *Store) Stats() Stats {
	c := s.gc
	return Stats{Commits: c.commits.Load(), Ops: c.ops_.Load(), BatchedOps: c.batchedOps.Load(), FailedCommits: c.failedCommits.Load(),
		MaxBatch: c.maxBatchSeen.Load(), CommitTime: time.Duration(c.commitNanos.Load()),
		ProgressQueued: c.prog.queued.Load(), ProgressFlushes: c.prog.flushes.Load(), ProgressFlushed: c.prog.flushed.Load()}
}

// ObserveCommits makes f hear of every committed transaction: its duration
// (BEGIN to COMMIT done) and how many writes it carried. Set it once, before
// the store is used; f must not block (it runs on the committer).
func (s *Store) ObserveCommits(f func(d time.Duration, writes int)) { s.gc.observe.Store(&f) }

// Ping proves the store takes a write: a write transaction whose one
// statement changes nothing. A read-only database (a PostgreSQL standby, a
// full or read-only SQLite file) refuses it.
func (s *Store) Ping(ctx context.Context) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE runs SET status = status WHERE 1 = 0`)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: write check: %w", err)
	}
	return nil
}
