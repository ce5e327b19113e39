package sessions

import (
	"errors"
	"strings"
	"sync"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func ackMsg(seq uint64) *curev1.CoordinatorMessage {
	return &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: seq}}}
}

// TestOutboxKeepsOrder: what one sender queues reaches the stream's writer
// in the order it was sent.
func TestOutboxKeepsOrder(t *testing.T) {
	s := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	for i := range uint64(OutboxSize) {
		if err := s.Send(ackMsg(i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range uint64(OutboxSize) {
		if got := (<-s.Outbox()).GetAck().GetSeq(); got != i {
			t.Fatalf("message %d out of the outbox is seq %d", i, got)
		}
	}
}

// TestOutboxFullClosesSession: a runner that does not read never blocks a
// sender; the send that finds the outbox full closes the session with
// ErrOutboxFull naming it, and later sends get ErrClosed.
func TestOutboxFullClosesSession(t *testing.T) {
	h := NewHub()
	s := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	h.Attach(s)
	for i := range uint64(OutboxSize) {
		if err := s.Send(ackMsg(i)); err != nil {
			t.Fatalf("send %d of %d: %v", i, OutboxSize, err)
		}
	}
	err := s.Send(ackMsg(OutboxSize))
	if !errors.Is(err, ErrOutboxFull) || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "boot b1") {
		t.Fatalf("send on a full outbox = %v, want ErrOutboxFull naming node n1, boot b1", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("a full outbox left the session open")
	}
	if err := s.Send(ackMsg(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after the outbox overflowed = %v, want ErrClosed", err)
	}
	if len(s.Outbox()) != OutboxSize {
		t.Fatalf("outbox holds %d, want the %d queued before it filled", len(s.Outbox()), OutboxSize)
	}
}

// TestSendAfterDetach: once the stream ends (the server detaches its
// session), a sender gets ErrClosed naming the session and nothing is
// queued.
func TestSendAfterDetach(t *testing.T) {
	h := NewHub()
	s := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	h.Attach(s)
	h.Detach(s)
	err := s.Send(ackMsg(1))
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "run r1") {
		t.Fatalf("send after detach = %v, want ErrClosed naming run r1", err)
	}
	if n := len(s.Outbox()); n != 0 {
		t.Fatalf("a closed session queued %d messages", n)
	}
}

// TestSendRacesClose: senders racing a close either queue their message
// before it or get ErrClosed, never another error, never a block (run
// with -race).
func TestSendRacesClose(t *testing.T) {
	h := NewHub()
	s := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	h.Attach(s)
	var wg sync.WaitGroup
	errs := make(chan error, 8*4)
	for range 8 {
		wg.Go(func() {
			for i := range uint64(4) {
				errs <- s.Send(ackMsg(i))
			}
		})
	}
	h.Detach(s)
	wg.Wait()
	close(errs)
	queued := 0
	for err := range errs {
		switch {
		case err == nil:
			queued++
		case !errors.Is(err, ErrClosed):
			t.Fatalf("send racing close = %v, want nil or ErrClosed", err)
		}
	}
	if len(s.Outbox()) != queued {
		t.Fatalf("%d sends succeeded, %d messages queued", queued, len(s.Outbox()))
	}
}
