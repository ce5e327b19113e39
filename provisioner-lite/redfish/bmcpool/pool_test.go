package bmcpool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pacing"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

func pooledBMC(t *testing.T) (*vbmc.BMC, store.Node) {
	t.Helper()
	bm, _, n := pooledBMCServer(t)
	return bm, n
}

func pooledBMCServer(t *testing.T) (*vbmc.BMC, *vbmc.Server, store.Node) {
	t.Helper()
	bm, err := vbmc.New(vbmc.Config{Name: "n1", Logger: quiet()}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Listen("127.0.0.1:0", bm, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return bm, srv, store.Node{ID: "n1", BMCURL: srv.URL, BMCUser: "admin", BMCPassword: "password", BMCFingerprint: srv.Fingerprint(),
		Labels: map[string]string{"rack": "r1"}}
}

// Pipeline steps share one session per BMC: sequential and concurrent steps
// log in once; an expired session is re-established; idle sessions are
// logged out; a new password makes a new session.
func TestBMCPoolOneSessionPerBMC(t *testing.T) {
	bm, n := pooledBMC(t)
	conn, _ := NewConnector("", 5*time.Second, quiet())
	p := New(conn, time.Minute, 2, 4, nil, []string{"rack"}, quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := func() {
		b, err := p.Connect(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PowerState(ctx); err != nil {
			t.Fatal(err)
		}
		b.Close(ctx)
	}
	for range 4 {
		step()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); step() }()
	}
	wg.Wait()
	if got := p.logged.Load(); got != 1 {
		t.Fatalf("%d logins for 12 steps, want 1", got)
	}
	if got := bm.SessionCount(); got != 1 {
		t.Fatalf("BMC has %d sessions, want 1", got)
	}
	// The BMC dropped the session (reset, timeout): the next call logs in again.
	bm.ExpireSessions()
	step()
	if got := bm.SessionCount(); got != 1 {
		t.Fatalf("after expiry: %d sessions, want 1", got)
	}
	// Idle: logged out.
	if n := p.evictIdle(ctx, time.Now().Add(2*time.Minute)); n != 1 || bm.SessionCount() != 0 {
		t.Fatalf("evicted %d, BMC sessions %d; want the one session logged out", n, bm.SessionCount())
	}
	// A rotated password is a new session.
	step()
	n.BMCPassword = "password2"
	if _, err := p.Connect(ctx, n); err == nil {
		t.Fatal("a wrong password reused the old session")
	}
	if got := p.logged.Load(); got != 2 {
		t.Fatalf("%d logins, want 2 (the first, and again after eviction)", got)
	}
}

// Between steps no connection to the BMC stays open, and the session
// does: the next step logs in no more.
func TestBMCPoolClosesIdleConnectionsBetweenSteps(t *testing.T) {
	bm, srv, n := pooledBMCServer(t)
	conn, _ := NewConnector("", 5*time.Second, quiet())
	p := New(conn, time.Minute, 2, 4, nil, []string{"rack"}, quiet())
	p.linger = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitConns := func(want int, when string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for srv.OpenConns() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the BMC has %d connections open, want %d", when, srv.OpenConns(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a, err := p.Connect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Connect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	waitConns(1, "during the step")
	a.Close(ctx)
	// b still holds the session: its connection is kept for it.
	time.Sleep(50 * time.Millisecond)
	waitConns(1, "one of two users released")
	b.Close(ctx)
	waitConns(0, "between steps")
	c, err := p.Connect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if got := p.logged.Load(); got != 1 || bm.SessionCount() != 1 {
		t.Fatalf("%d logins, %d BMC sessions; want the one session kept across steps", got, bm.SessionCount())
	}
	waitConns(0, "after the next step")
}

// A step that follows the last one within the linger uses its connection
// (no new handshake); after the linger the connection is closed, and the
// next step opens one; with no linger the connection closes at release.
func TestBMCPoolReusesConnectionWithinLinger(t *testing.T) {
	_, srv, n := pooledBMCServer(t)
	conn, _ := NewConnector("", 5*time.Second, quiet())
	p := New(conn, time.Minute, 2, 4, nil, []string{"rack"}, quiet())
	p.linger = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := func() {
		t.Helper()
		h, err := p.Connect(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.PowerState(ctx); err != nil {
			t.Fatal(err)
		}
		h.Close(ctx)
	}
	for range 3 {
		step()
	}
	if got := srv.Accepted(); got != 1 {
		t.Fatalf("three steps back to back opened %d connections, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.OpenConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle connection is still open %v after the last step", 5*time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	step()
	if got := srv.Accepted(); got != 2 {
		t.Fatalf("a step after the linger: %d connections in all, want 2", got)
	}
	p.linger = 0
	step()
	deadline = time.Now().Add(5 * time.Second)
	for srv.OpenConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("with no linger the connection stays open after release")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At most maxInflight calls reach one BMC at once, and at most maxLogins
// logins are under way over all BMCs.
func TestBMCPoolBoundsConcurrency(t *testing.T) {
	_, n := pooledBMC(t)
	conn, _ := NewConnector("", 5*time.Second, quiet())
	p := New(conn, time.Minute, 2, 1, nil, nil, quiet())
	var inLogin, maxLogin atomic.Int32
	p.dial = func(ctx context.Context, ep redfish.Endpoint, o redfish.Options) (*redfish.Client, error) {
		v := inLogin.Add(1)
		for {
			m := maxLogin.Load()
			if v <= m || maxLogin.CompareAndSwap(m, v) {
				break
			}
		}
		defer inLogin.Add(-1)
		time.Sleep(20 * time.Millisecond)
		return redfish.Connect(ctx, ep, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var handles sync.Map
	for i := range 6 {
		nn := n
		nn.BMCPassword = "password"
		nn.BMCUser = "admin"
		nn.ID = "n" + string(rune('a'+i))
		nn.BMCURL = n.BMCURL + "/" // a distinct key per "BMC": same server
		if i%2 == 0 {
			nn.BMCURL = n.BMCURL
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.Connect(ctx, nn)
			if err == nil {
				handles.Store(nn.ID, b)
			}
		}()
	}
	wg.Wait()
	if m := maxLogin.Load(); m != 1 {
		t.Errorf("%d logins at once, want at most 1", m)
	}
	// Hold both slots of one BMC: a third call waits for one to be freed.
	e := func() *entry {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, e := range p.entries {
			return e
		}
		return nil
	}()
	h := &handle{Client: e.client, e: e, p: p}
	h.acquire(ctx)
	h.acquire(ctx)
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if _, err := h.PowerState(short); err == nil {
		t.Fatal("a third call went through while 2 were in flight")
	}
	h.done()
	if _, err := h.PowerState(ctx); err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
}

// Power-ons of one rack wait for the pacer; other calls do not.
func TestBMCPoolPacesPowerOn(t *testing.T) {
	_, n := pooledBMC(t)
	conn, _ := NewConnector("", 5*time.Second, quiet())
	var slept []time.Duration
	clock := time.Unix(0, 0)
	pacer := &pacing.Pacer{Rate: 1, Burst: 1, Now: func() time.Time { return clock },
		Sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }}
	p := New(conn, time.Minute, 2, 4, pacer, []string{"pdu", "rack"}, quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := p.Connect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	for range 3 {
		if err := b.PowerOn(ctx); err != nil {
			t.Fatal(err)
		}
		b.PowerOff(ctx, true)
	}
	if len(slept) != 2 || slept[0] != time.Second || slept[1] != 2*time.Second {
		t.Fatalf("paced waits %v; want 1s then 2s (rate 1/s, burst 1, no time passing)", slept)
	}
	if err := b.Reset(ctx, "ForceRestart"); err != nil {
		t.Fatal(err)
	}
	if len(slept) != 2 {
		t.Fatalf("a warm restart was paced: %v", slept)
	}
}
