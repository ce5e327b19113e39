package sessions

import (
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// OnChange hears every queued message and the close, once; a session
// closed already calls it at once; nil stops it.
func TestOnChange(t *testing.T) {
	h := NewHub()
	s := NewSession("n1", "r1", &curev1.Hello{BootId: "b1"})
	h.Attach(s)
	var calls int
	s.OnChange(func() { calls++ })
	if calls != 0 {
		t.Fatalf("open session: OnChange called %d times at once", calls)
	}
	for range 3 {
		if err := s.Send(&curev1.CoordinatorMessage{}); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Fatalf("3 messages queued: %d calls", calls)
	}
	h.Detach(s)
	h.Detach(s)
	if calls != 4 {
		t.Fatalf("after the close: %d calls, want 4 (one for the close)", calls)
	}
	late := 0
	s.OnChange(func() { late++ })
	if late != 1 {
		t.Fatalf("OnChange on a closed session: %d calls, want 1 at once", late)
	}
	s2 := NewSession("n2", "r2", &curev1.Hello{BootId: "b2"})
	s2.OnChange(func() { t.Error("called after OnChange(nil)") })
	s2.OnChange(nil)
	_ = s2.Send(&curev1.CoordinatorMessage{})
	s2.close()
}
