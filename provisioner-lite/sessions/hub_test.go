package sessions

import (
	"errors"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestAttachReplacesAndNotifies(t *testing.T) {
	h := NewHub()
	ch := h.Changed("n1")
	s1 := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	h.Attach(s1)
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("attach did not notify")
	}
	if h.Current("n1") != s1 {
		t.Fatal("s1 not current")
	}
	if err := s1.Send(&curev1.CoordinatorMessage{}); err != nil || len(s1.Outbox()) != 1 {
		t.Fatalf("send: %v, %d queued", err, len(s1.Outbox()))
	}
	s2 := NewSession("n1", "r1", &curev1.Hello{BootId: "b2"})
	h.Attach(s2)
	select {
	case <-s1.Done():
	default:
		t.Fatal("replaced session not closed")
	}
	if err := s1.Send(&curev1.CoordinatorMessage{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send on replaced session = %v, want ErrClosed", err)
	}
	// Detaching the stale session must not remove the new one.
	h.Detach(s1)
	if h.Current("n1") != s2 {
		t.Fatal("stale detach removed the current session")
	}
	ch = h.Changed("n1")
	h.Detach(s2)
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("detach did not notify")
	}
	if h.Current("n1") != nil {
		t.Fatal("session still current after detach")
	}
}

func TestCloseRun(t *testing.T) {
	h := NewHub()
	a := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	b := NewSession("n2", "r2", &curev1.Hello{BootId: "b2"})
	h.Attach(a)
	h.Attach(b)
	changed := h.Changed("n1")
	if n := h.CloseRun("r1"); n != 1 {
		t.Fatalf("CloseRun closed %d sessions, want 1", n)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("session of the closed run still open")
	}
	select {
	case <-changed:
	default:
		t.Fatal("waiters of n1 not woken")
	}
	if h.Current("n1") != nil || h.Current("n2") != b {
		t.Fatalf("after CloseRun: n1=%v n2=%v", h.Current("n1"), h.Current("n2"))
	}
	if err := a.Send(&curev1.CoordinatorMessage{}); err == nil {
		t.Fatal("send on a closed session succeeded")
	}
}
