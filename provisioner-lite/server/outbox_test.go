package server_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
)

func queuedAck(seq uint64) *curev1.CoordinatorMessage {
	return &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: seq}}}
}

// TestSessionOutboxInOrder: what the pipeline queues on a session reaches
// the runner in order, written by the session's goroutine alongside the
// acks of the runner's events.
func TestSessionOutboxInOrder(t *testing.T) {
	h := newHostile(t)
	stream, cancel := h.session(helloOpts{token: h.fetchToken(nodeA.mac), boot: "boot1", node: nodeA})
	defer cancel()
	waitFor(t, func() bool { return h.hub.Current(nodeA.id) != nil })
	sess := h.hub.Current(nodeA.id)
	const queued = 20
	for i := range uint64(queued) {
		if err := sess.Send(queuedAck(1000 + i)); err != nil {
			t.Fatalf("queue message %d: %v", i, err)
		}
	}
	if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: logEvent(1, nodeA.run, "hello")}}); err != nil {
		t.Fatal(err)
	}
	next, sawAck := uint64(1000), false
	for next < 1000+queued || !sawAck {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d queued messages (ack seen %v): %v", next-1000, sawAck, err)
		}
		switch seq := m.GetAck().GetSeq(); {
		case seq == 1:
			sawAck = true
		case seq != next:
			t.Fatalf("queued message %d arrived as seq %d", next-1000, seq)
		default:
			next++
		}
	}
}

// TestSessionRunnerNotReading: a runner that stops reading its stream
// never blocks the pipeline's sends: once the stream's buffers and the
// bounded outbox are full, Send closes the session (ErrOutboxFull) and later
// sends get ErrClosed; when the stream ends, the session leaves the hub.
func TestSessionRunnerNotReading(t *testing.T) {
	h := newHostile(t)
	_, cancel := h.session(helloOpts{token: h.fetchToken(nodeA.mac), boot: "boot1", node: nodeA})
	defer cancel()
	waitFor(t, func() bool { return h.hub.Current(nodeA.id) != nil })
	sess := h.hub.Current(nodeA.id)
	big := &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Assignment{Assignment: &curev1.Assignment{
		RunId: nodeA.run, ManifestYaml: bytes.Repeat([]byte("x"), 512<<10)}}}
	start := time.Now()
	var err error
	sent := 0
	for ; sent < 1000 && err == nil; sent++ {
		err = sess.Send(big)
	}
	if !errors.Is(err, sessions.ErrOutboxFull) {
		t.Fatalf("%d sends of 512 KiB to a runner that does not read: last error %v, want ErrOutboxFull", sent, err)
	}
	t.Logf("outbox full after %d sends of 512 KiB in %v", sent, time.Since(start))
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("sends to a runner that does not read took %v: the pipeline waited on the runner", d)
	}
	if err := sess.Send(queuedAck(1)); !errors.Is(err, sessions.ErrClosed) {
		t.Fatalf("send after the outbox overflowed = %v, want ErrClosed", err)
	}
	cancel() // the runner goes: the session's goroutine ends, the hub lets it go
	waitFor(t, func() bool { return h.hub.Current(nodeA.id) == nil })
}
