package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/dashboard"
	"github.com/cure-oss/cure/provisioner-lite/pki"
)

// countingObserver counts what the live streams report.
type countingObserver struct {
	open, snapshots, updates atomic.Int64
	mu                       sync.Mutex
	refused                  map[string]int
}

func (o *countingObserver) DashboardStreams(n int) { o.open.Store(int64(n)) }
func (o *countingObserver) DashboardStreamRefused(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused[reason]++
}
func (o *countingObserver) DashboardSnapshot()     { o.snapshots.Add(1) }
func (o *countingObserver) DashboardStreamUpdate() { o.updates.Add(1) }

// liveStream is one open /events stream; its deltas arrive on c.
type liveStream struct {
	c      chan dashboard.Delta
	cancel context.CancelFunc
}

// openStream opens /events as the client's operator: the stream, or the
// refusal's status and message.
func openStream(t *testing.T, hc *http.Client, url string) (*liveStream, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/events?nodes=node-0001,node-0002,node-0003", nil)
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	s := &liveStream{c: make(chan dashboard.Delta, 64), cancel: cancel}
	t.Cleanup(cancel)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var d dashboard.Delta
				if json.Unmarshal([]byte(data), &d) == nil {
					s.c <- d
				}
			}
		}
	}()
	return s, resp.StatusCode, ""
}

func (s *liveStream) next(t *testing.T) dashboard.Delta {
	t.Helper()
	select {
	case d := <-s.c:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no delta on the live stream")
		return dashboard.Delta{}
	}
}

func waitCount(t *testing.T, what string, v *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for v.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", what, v.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Live streams are capped per operator and in total (429 with what to do),
// a refused or closed stream holds nothing, and every stream reads the one
// snapshot taken per tick: the store is read once per tick, not once per
// stream, and each stream still gets exactly the rows that changed.
func TestLiveStreamsShareOneSnapshot(t *testing.T) {
	st := fleetStore(t, 300)
	dir := t.TempDir()
	caPEM, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	obs := &countingObserver{refused: map[string]int{}}
	cfg := dashboard.Config{Store: st, Auth: dashboard.CertViewer, Log: quiet, MaxStreams: 5, MaxStreamsPerViewer: 3, Observer: obs}
	srv := httptest.NewUnstartedServer(dashboard.Handler(dashboard.WithTicks(cfg, ticks)))
	srv.TLS = dashboard.TLSConfig(tlsCfg)
	srv.StartTLS()
	t.Cleanup(srv.Close) // after the streams' cleanups cancel them: Close waits for open requests
	client := func(name string) *http.Client {
		if _, err := pki.IssueOperatorCert(dir, name, pki.RoleViewer); err != nil {
			t.Fatal(err)
		}
		cert, err := pki.LoadOperatorCert(pki.OperatorCertFiles(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", &cert)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cc}}
	}
	alice, bob := client("alice"), client("bob")

	var streams []*liveStream
	for i := 0; i < 3; i++ {
		s, code, msg := openStream(t, alice, srv.URL)
		if s == nil {
			t.Fatalf("alice's stream %d: %d %s", i, code, msg)
		}
		streams = append(streams, s)
	}
	if _, code, msg := openStream(t, alice, srv.URL); code != http.StatusTooManyRequests || !strings.Contains(msg, "alice already has 3 live dashboard streams open") {
		t.Fatalf("alice's 4th stream: %d %q, want 429 naming the per-operator cap", code, msg)
	}
	for i := 0; i < 2; i++ {
		s, code, msg := openStream(t, bob, srv.URL)
		if s == nil {
			t.Fatalf("bob's stream %d: %d %s", i, code, msg)
		}
		streams = append(streams, s)
	}
	if _, code, msg := openStream(t, bob, srv.URL); code != http.StatusTooManyRequests || !strings.Contains(msg, "5 live dashboard streams are open on this coordinator") {
		t.Fatalf("a 6th stream: %d %q, want 429 naming the total cap", code, msg)
	}
	obs.mu.Lock()
	if obs.refused[dashboard.StreamCapOperator] != 1 || obs.refused[dashboard.StreamCapTotal] != 1 {
		t.Errorf("refusals reported: %v", obs.refused)
	}
	obs.mu.Unlock()

	// Each stream's first message: the counts and its three rows.
	for i, s := range streams {
		d := s.next(t)
		if d.Nodes != 300 || len(d.Changed) != 3 || d.Changed[0].Node != "node-0001" {
			t.Fatalf("stream %d's first delta: %d nodes, rows %+v", i, d.Nodes, d.Changed)
		}
	}
	waitCount(t, "stream updates", &obs.updates, 5)
	if n := obs.snapshots.Load(); n != 1 {
		t.Fatalf("%d snapshots taken for 5 streams opening, want 1", n)
	}

	// A change, then ticks without change, then another change: every
	// stream gets the first change, nothing for the quiet ticks, then the
	// second change; one snapshot per tick in all.
	setStatus := func(node string, status curev1.RunStatus) {
		r, err := st.GetRun(context.Background(), "run-"+node)
		if err != nil {
			t.Fatal(err)
		}
		r.Status, r.Phase, r.EndedAt = status, modes.BIOS, time.Now().UTC()
		if err := st.UpdateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	const quiet = 20
	tick := func() int64 {
		ticks <- time.Now()
		want := obs.snapshots.Load() + 1
		waitCount(t, "snapshots", &obs.snapshots, want)
		waitCount(t, "stream updates", &obs.updates, 5*want)
		return want
	}
	setStatus("node-0002", curev1.RunStatus_RUN_ATTENTION)
	tick()
	for i := 0; i < quiet; i++ {
		tick()
	}
	setStatus("node-0003", curev1.RunStatus_RUN_ATTENTION)
	taken := tick()
	for i, s := range streams {
		for _, want := range []string{"node-0002", "node-0003"} {
			d := s.next(t)
			if len(d.Changed) != 1 || d.Changed[0].Node != want || d.Changed[0].Status != "attention" {
				t.Fatalf("stream %d: delta %+v, want only %s turned attention (and nothing for the quiet ticks)", i, d.Changed, want)
			}
		}
	}
	if taken != quiet+3 || obs.updates.Load() != 5*taken {
		t.Fatalf("%d ticks with 5 streams: %d snapshots taken, %d stream updates; want one snapshot per tick shared by all", quiet+3, taken, obs.updates.Load())
	}
	t.Logf("%d ticks, 5 streams: %d snapshots taken, %d stream updates", quiet+3, taken, obs.updates.Load())

	// A closed stream gives its slot back.
	streams[0].cancel()
	waitCount(t, "open streams", &obs.open, 4)
	if s, code, msg := openStream(t, bob, srv.URL); s == nil {
		t.Fatalf("bob's stream after alice closed one: %d %s", code, msg)
	}
}

// BenchmarkLiveStreams is one tick of 100 streams from one viewer over a
// fleet of 1,000 nodes: each stream computing its own snapshot (as the
// streams did) against all streams sharing one.
func BenchmarkLiveStreams(b *testing.B) {
	st := fleetStore(b, 1000)
	var nodes []string
	for i := range 100 {
		nodes = append(nodes, fmt.Sprintf("node-%04d", i))
	}
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "per-stream", true: "shared"}[shared]
		b.Run(name, func(b *testing.B) {
			streams := dashboard.NewBenchStreams(100, dashboard.Filter{}, strings.Join(nodes, ","))
			for b.Loop() {
				if _, err := streams.Tick(context.Background(), st, shared); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
