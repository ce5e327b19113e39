package runsignal

import (
	"testing"
	"time"
)

func expect(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatalf("no signal after %s", what)
	}
}

func expectNone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected signal after %s", what)
	default:
	}
}

// TestNotify: a run's subscribers are signalled, other runs' are not; a
// burst while nobody reads coalesces into one pending signal and the
// notifier never blocks; an unsubscribed channel hears nothing and the run
// leaves the bus with its last subscriber.
func TestNotify(t *testing.T) {
	b := New()
	ch, cancel := b.Subscribe("r1")
	ch2, cancel2 := b.Subscribe("r1")
	other, cancelOther := b.Subscribe("r2")
	defer cancelOther()

	b.Notify("r1")
	expect(t, ch, "Notify")
	expect(t, ch2, "Notify (second subscriber)")
	expectNone(t, other, "a notification of r1")

	done := make(chan struct{})
	go func() {
		for range 1000 {
			b.Notify("r1")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Notify blocked on subscribers that do not read")
	}
	expect(t, ch, "burst")
	expectNone(t, ch, "drained burst")

	cancel()
	cancel() // idempotent
	b.Notify("r1")
	expectNone(t, ch, "unsubscribe")
	if n := b.subscribers("r1"); n != 1 {
		t.Fatalf("r1 has %d subscribers after one of two left, want 1", n)
	}
	cancel2()
	if n := b.subscribers("r1"); n != 0 {
		t.Fatalf("r1 has %d subscribers after all left", n)
	}
	b.Notify("nobody") // a run without subscribers: nothing to do, no panic
}
