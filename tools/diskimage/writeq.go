package diskimage

import (
	"context"
	"sync"
)

// writeDepth is how many blocks' device writes may be in flight at once.
// A synchronous O_DIRECT write leaves the writer idle until the device
// answers; with the next block's zero scan and CRC overlapping it (and a
// second write queued behind it) the writer stops being the stage that
// holds the pipeline up. Each in-flight write holds one block buffer, so
// blockBufs must cover the decoder's block, the queue to the writer, the
// one being planned and these. Four rather than two: with every stage on
// two shared cores the device's answers come late (the loop device's
// worker waits for a core too), and two more writes in flight kept it
// busy: incompressible 973 against 870 MB/s (532 against 472 in another
// run), the same on a mostly-zero image (`bench-install -writers`, same
// runs, 2026-11-29, load 5-18).
const writeDepth = 4

// op is one device operation planned for a block: a data write of p at
// off, or (p == nil) a range of n bytes at off to be zeroed.
type op struct {
	p   []byte
	off int64
	n   int64
}

// writeJob is a block's planned operations; buf goes back to the free
// list once they are done, end is the image offset after the block.
type writeJob struct {
	seq int64
	buf []byte
	ops []op
	end int64
}

// writeQueue runs planned writes on writeDepth goroutines. Completion is
// accounted in block order: written and Progress only ever cover a
// prefix of the image every byte of which has reached the target. After
// the first failure nothing more is written.
type writeQueue struct {
	ctx      context.Context // once done (a stage failed), nothing more is written
	t        target
	jobs     chan writeJob
	wg       sync.WaitGroup
	free     *freeList
	progress func(int64)
	fail     func(error)
	seq      int64 // next job's sequence number (submitter only)

	mu      sync.Mutex
	err     error           // the first failure
	next    int64           // oldest job not yet complete
	done    map[int64]int64 // completed ahead of next: seq → end
	written int64           // end of the completed prefix
}

func newWriteQueue(ctx context.Context, t target, depth int, free *freeList, progress func(int64), fail func(error)) *writeQueue {
	q := &writeQueue{ctx: ctx, t: t, jobs: make(chan writeJob), free: free, progress: progress, fail: fail, done: map[int64]int64{}}
	q.wg.Add(depth)
	for range depth {
		go q.worker()
	}
	return q
}

// submit hands a block's operations to a free worker, waiting for one.
func (q *writeQueue) submit(buf []byte, ops []op, end int64) {
	q.jobs <- writeJob{seq: q.seq, buf: buf, ops: ops, end: end}
	q.seq++
}

// wait stops the workers once every submitted job is done and returns the
// first failure.
func (q *writeQueue) wait() error {
	close(q.jobs)
	q.wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *writeQueue) failed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err != nil
}

func (q *writeQueue) worker() {
	defer q.wg.Done()
	for j := range q.jobs {
		if q.ctx.Err() != nil || q.failed() {
			// Not written: the completed prefix ends before this block.
			q.free.put(j.buf)
			continue
		}
		err := runOps(q.t, j.ops)
		q.free.put(j.buf)
		q.complete(j, err)
	}
}

func (q *writeQueue) complete(j writeJob, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		if q.err == nil {
			q.err = err
			q.fail(err)
		}
		return
	}
	if q.err != nil {
		return
	}
	q.done[j.seq] = j.end
	for {
		end, ok := q.done[q.next]
		if !ok {
			return
		}
		delete(q.done, q.next)
		q.next++
		q.written = end
		if q.progress != nil {
			q.progress(end)
		}
	}
}

// runOps performs planned operations in order, stopping at the first
// failure.
func runOps(t target, ops []op) error {
	for _, o := range ops {
		if o.p == nil {
			if err := t.ZeroRange(o.off, o.n); err != nil {
				return &writeError{off: o.off, err: err}
			}
			continue
		}
		if _, err := t.WriteAt(o.p, o.off); err != nil {
			return &writeError{off: o.off, err: err}
		}
	}
	return nil
}
