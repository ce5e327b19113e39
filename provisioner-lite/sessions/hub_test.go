package sessions

import (
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestAttachReplacesAndNotifies(t *testing.T) {
	h := NewHub()
	ch := h.Changed("n1")
	var sent []*curev1.CoordinatorMessage
	s1 := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"}, func(m *curev1.CoordinatorMessage) error { sent = append(sent, m); return nil })
	h.Attach(s1)
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("attach did not notify")
	}
	if h.Current("n1") != s1 {
		t.Fatal("s1 not current")
	}
	if err := s1.Send(&curev1.CoordinatorMessage{}); err != nil || len(sent) != 1 {
		t.Fatalf("send: %v, %d sent", err, len(sent))
	}
	s2 := NewSession("n1", "r1", &curev1.Hello{BootId: "b2"}, func(*curev1.CoordinatorMessage) error { return nil })
	h.Attach(s2)
	select {
	case <-s1.Done():
	default:
		t.Fatal("replaced session not closed")
	}
	if err := s1.Send(&curev1.CoordinatorMessage{}); err != ErrClosed {
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
