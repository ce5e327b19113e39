package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Each jitter stays in its band of min(Max, Base·2^(n-1)), and a huge
// attempt count neither overflows nor passes Max.
func TestDelayBounds(t *testing.T) {
	base, maxD := 100*time.Millisecond, 5*time.Second
	for _, tc := range []struct {
		j      Jitter
		lowDiv time.Duration // the band's floor is d/lowDiv (0: floor 0)
	}{{Full, 0}, {Half, 2}, {None, 1}} {
		p := Policy{Base: base, Max: maxD, Jitter: tc.j}
		for _, n := range []int{0, 1, 2, 3, 6, 7, 60, 1 << 30} {
			want := base
			for i := 1; i < n && want < maxD; i++ {
				want *= 2
			}
			want = min(want, maxD)
			low := time.Duration(0)
			if tc.lowDiv > 0 {
				low = want / tc.lowDiv
			}
			for range 200 {
				if d := p.Delay(n); d < low || d > want {
					t.Fatalf("jitter %d attempt %d: %v outside [%v, %v]", tc.j, n, d, low, want)
				}
			}
		}
	}
	if d := (Policy{}).Delay(3); d != 0 {
		t.Fatalf("zero policy delays %v", d)
	}
}

// Full jitter spreads: 200 draws are not all alike.
func TestDelaySpreads(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Second}
	seen := map[time.Duration]bool{}
	for range 200 {
		seen[p.Delay(1)] = true
	}
	if len(seen) < 100 {
		t.Fatalf("%d distinct delays in 200 draws", len(seen))
	}
}

func recorder(waits *[]time.Duration) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error {
		*waits = append(*waits, d)
		return ctx.Err()
	}
}

// Do retries up to Attempts, tells OnRetry of each retry with its wait,
// and returns the last error.
func TestDoAttempts(t *testing.T) {
	var waits []time.Duration
	var told []int
	calls := 0
	boom := errors.New("boom")
	p := Policy{Base: time.Millisecond, Max: 4 * time.Millisecond, Jitter: None, Attempts: 4, Sleep: recorder(&waits),
		OnRetry: func(n int, err error, d time.Duration) {
			if !errors.Is(err, boom) {
				t.Errorf("OnRetry got %v", err)
			}
			told = append(told, n)
		}}
	err := p.Do(context.Background(), func(_ context.Context, n int) error {
		calls++
		if n != calls {
			t.Fatalf("attempt %d on call %d", n, calls)
		}
		return boom
	})
	if !errors.Is(err, boom) || calls != 4 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if len(waits) != 3 || waits[0] != want[0] || waits[1] != want[1] || waits[2] != want[2] || len(told) != 3 {
		t.Fatalf("waits %v (want %v), retries told %v", waits, want, told)
	}
}

// Success ends the loop; Permanent stops it at once; After replaces the
// policy's wait.
func TestDoStops(t *testing.T) {
	var waits []time.Duration
	p := Policy{Base: time.Second, Max: time.Second, Jitter: None, Sleep: recorder(&waits)}
	n := 0
	if err := p.Do(context.Background(), func(context.Context, int) error {
		n++
		if n < 3 {
			return After(7*time.Millisecond, errors.New("busy"))
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("err %v after %d calls", err, n)
	}
	if len(waits) != 2 || waits[0] != 7*time.Millisecond {
		t.Fatalf("waits %v, want the server's 7ms twice", waits)
	}
	bad := errors.New("refused")
	n = 0
	err := p.Do(context.Background(), func(context.Context, int) error { n++; return Permanent(bad) })
	if err != bad || n != 1 || IsPermanent(err) {
		t.Fatalf("permanent: %v after %d calls", err, n)
	}
	if !IsPermanent(Permanent(bad)) || IsPermanent(bad) {
		t.Fatal("IsPermanent")
	}
}

// A context that ends during a wait ends Do with both errors, on the
// real clock, long before the wait was due.
func TestDoContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	boom := errors.New("boom")
	start := time.Now()
	err := Policy{Base: time.Hour, Max: time.Hour, Jitter: None}.Do(ctx, func(context.Context, int) error { return boom })
	if !errors.Is(err, boom) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("Do waited %v after its context ended", el)
	}
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep on an ended context: %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
