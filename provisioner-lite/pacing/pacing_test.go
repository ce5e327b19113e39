package pacing

import (
	"context"
	"testing"
	"time"
)

// fakeClock advances only when the pacer sleeps.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.t = c.t.Add(d)
	return nil
}

func TestPacerSpacesAGroupNotOthers(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := &Pacer{Rate: 2, Burst: 4, Now: clk.now, Sleep: clk.sleep}
	ctx := context.Background()
	start := clk.t
	var at []time.Duration
	for range 10 {
		if _, err := p.Wait(ctx, "rack=r1"); err != nil {
			t.Fatal(err)
		}
		at = append(at, clk.t.Sub(start))
	}
	// Four at once (the burst), then one every 500 ms.
	for i, d := range at {
		want := time.Duration(0)
		if i >= 4 {
			want = time.Duration(i-3) * 500 * time.Millisecond
		}
		if d != want {
			t.Errorf("power-on %d at %v, want %v", i, d, want)
		}
	}
	// Another rack is not held back by r1's queue.
	before := clk.t
	if d, _ := p.Wait(ctx, "rack=r2"); d != 0 || clk.t != before {
		t.Errorf("rack r2 waited %v", d)
	}
	// Unpaced.
	var none *Pacer
	if d, err := none.Wait(ctx, "x"); d != 0 || err != nil {
		t.Errorf("nil pacer: %v %v", d, err)
	}
}

func TestGroup(t *testing.T) {
	keys := []string{"pdu", "rack"}
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{{map[string]string{"rack": "r1", "pdu": "p7"}, "pdu=p7"}, {map[string]string{"rack": "r1"}, "rack=r1"}, {nil, "default"}} {
		if got := Group(c.labels, keys); got != c.want {
			t.Errorf("Group(%v) = %q, want %q", c.labels, got, c.want)
		}
	}
}
