package server

import (
	"context"
	"errors"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"google.golang.org/grpc/tap"
)

// A connected runner costs grpc-go three goroutines (the connection's
// reader, its writer and its keepalive loop) and one for the session's
// handler. The handler is the session's only goroutine of its own: it
// reads the stream itself, instead of a receiver goroutine handing it each
// message, and what wakes a select loop in other servers reaches it
// without one. The hub closing the session cancels the stream's context,
// which ends the handler's Recv (sessionTap gives the session that cancel),
// and a message the pipeline queued is written by a goroutine that lives
// only while the outbox has something (sessionWriter). At 10,000 runners
// that is 10,000 goroutines, and their stacks, fewer.
//
// The price: a session the hub closes while its runner is silent ends
// with Canceled, which gRPC writes when a read is cancelled, not with the
// status the handler returns (RunEnded, Aborted). The runner dials again
// after its backoff, as it does on any other end, and its Hello is answered
// with that status (a run that ended: RunEnded; superseded or contested:
// judged again). A close seen after a message arrived still ends with it.

// streamCtl is a runner session stream's own control: its context as gRPC
// made it (it ends when the runner goes or the server stops) and the
// cancel of the context the stream reads under.
type streamCtl struct {
	parent context.Context
	cancel context.CancelCauseFunc
}

type streamCtlKey struct{}

// errSessionClosed ends a session's Recv when the hub closed the session.
var errSessionClosed = errors.New("runner session closed by the coordinator")

// errHelloTimeout ends the wait for a Hello.
var errHelloTimeout = errors.New("timeout")

// sessionTap is the server's tap handle (ServerOptions): a runner session's
// stream reads under a context the session can cancel, which gRPC offers
// no other way (a handler may only return). Other calls pass unchanged.
func sessionTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != curev1.RunnerService_Session_FullMethodName {
		return ctx, nil
	}
	c, cancel := context.WithCancelCause(ctx)
	return context.WithValue(c, streamCtlKey{}, &streamCtl{parent: ctx, cancel: cancel}), nil
}

// streamControl is the session's control of its stream, nil on a server
// built without ServerOptions (tests): the session then waits in a select
// loop with a receiver goroutine, as before.
func streamControl(ctx context.Context) *streamCtl {
	ctl, _ := ctx.Value(streamCtlKey{}).(*streamCtl)
	return ctl
}

// recvWithTimeout is the stream's next message, received within d. A
// goroutine waits for Recv, only until the Hello: cancelling the stream's
// read at the deadline instead would answer Canceled (gRPC writes that
// status itself), where the runner must read DeadlineExceeded.
func recvWithTimeout(stream curev1.RunnerService_SessionServer, d time.Duration) (*curev1.RunnerMessage, error) {
	type res struct {
		m   *curev1.RunnerMessage
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := stream.Recv()
		ch <- res{m, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-t.C:
		return nil, errHelloTimeout
	}
}

// serveInline is serve on the handler's goroutine alone: it reads the
// stream, handles and acks each event; the hub closing the session cancels
// the read (sessionWriter.changed).
func (rs *liveSession) serveInline(ctx context.Context, stream curev1.RunnerService_SessionServer, ctl *streamCtl) error {
	w := &sessionWriter{stream: stream, sess: rs.sess, wake: ctl.cancel}
	rs.sess.OnChange(w.changed)
	defer w.finish()
	w.kick() // what was queued before OnChange
	for {
		msg, err := stream.Recv()
		select {
		case <-rs.sess.Done():
			return rs.closed(ctx)
		default:
		}
		if err != nil {
			return nil // the runner is gone; the hub's Detach ends the session for its senders
		}
		rs.sess.Received()
		if gone, err := rs.handleMessage(ctx, w, msg); gone || err != nil {
			return err
		}
	}
}

// sessionWriter writes a session's stream: the handler's acks and, from a
// goroutine started when something is queued and ended when the outbox is
// empty, what the pipeline queued, in its order. gRPC allows one writer at
// a time, and none once the handler returned.
type sessionWriter struct {
	stream curev1.RunnerService_SessionServer
	sess   *sessions.Session
	wake   context.CancelCauseFunc // ends the handler's Recv; nil in the select loop

	mu       sync.Mutex // held across stream.Send
	finished bool       // the handler returned

	qmu      sync.Mutex
	draining bool // a drain goroutine runs
	again    bool // something was queued while it ran
}

var errStreamFinished = errors.New("runner session stream finished")

func (w *sessionWriter) send(m *curev1.CoordinatorMessage) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return errStreamFinished
	}
	return w.stream.Send(m)
}

// changed is the session's OnChange: a closed session ends the handler's
// read, a queued message is written. It runs under the session's lock and
// does not block.
func (w *sessionWriter) changed() {
	select {
	case <-w.sess.Done():
		w.wake(errSessionClosed)
		return
	default:
	}
	w.kick()
}

// kick makes sure a drain goroutine will see what is queued now.
func (w *sessionWriter) kick() {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.draining {
		w.again = true
		return
	}
	w.draining = true
	go w.drain()
}

// drain writes the outbox until it is empty. A write that fails (the
// runner is gone, the stream finished) ends the handler's read; what is
// queued then is dropped, as one written to a dying stream.
func (w *sessionWriter) drain() {
	for {
		select {
		case m := <-w.sess.Outbox():
			if err := w.send(m); err != nil {
				w.wake(err)
			}
			continue
		default:
		}
		w.qmu.Lock()
		if !w.again {
			w.draining = false
			w.qmu.Unlock()
			return
		}
		w.again = false
		w.qmu.Unlock()
	}
}

// finish is the handler's last word: no more wakes, no more writes.
func (w *sessionWriter) finish() {
	w.sess.OnChange(nil)
	w.mu.Lock()
	w.finished = true
	w.mu.Unlock()
}
