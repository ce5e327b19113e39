package bootserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/artifactpeer"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// peerInstance is one coordinator instance as far as artifacts go: its
// registry entry in a shared store, its boot server filling misses from
// the peers the registry lists, and a count of the peer fetches it got.
type peerInstance struct {
	id        string
	st        *store.Store
	hs        *httptest.Server
	dir       string
	peerHits  atomic.Int64
	peerURL   string // what it registers (set before register)
	sharedLog atomic.Int64
}

func newPeerInstance(t *testing.T, db, id string) *peerInstance {
	t.Helper()
	p := &peerInstance{id: id, dir: t.TempDir()}
	st, err := store.Open(db, store.WithInstance(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p.st = st
	filler, err := artifactpeer.New(artifactpeer.Config{Dir: p.dir, Log: slog.New(slog.DiscardHandler), Timeout: 5 * time.Second,
		Peers: func(ctx context.Context) ([]artifactpeer.Source, error) {
			all, err := st.Instances(ctx, time.Minute)
			if err != nil {
				return nil, err
			}
			var reg []artifactpeer.Peer
			for _, i := range all {
				reg = append(reg, artifactpeer.Peer{ID: i.ID, URL: i.ArtifactURL})
			}
			srcs, shared := artifactpeer.PeerSources(artifactpeer.Peer{ID: id, URL: p.peerURL}, reg, "/artifacts/sha256")
			p.sharedLog.Add(int64(len(shared)))
			return srcs, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Nodes are given the shared address; peers reach this instance at
	// its own URL (the test server's).
	s, err := New(Config{ImageDir: t.TempDir(), ArtifactDir: p.dir, BaseURL: "http://cure.example:8080", Fill: filler.Ensure,
		Logger: slog.New(slog.DiscardHandler)}, &fakeCoordinator{})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	p.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(artifactpeer.PeerHeader) != "" {
			p.peerHits.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(p.hs.Close)
	return p
}

func (p *peerInstance) register(t *testing.T, u string) {
	t.Helper()
	p.peerURL = u
	if err := p.st.Heartbeat(context.Background(), u, 0); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two instances behind one load balancer, which here sends every request
// to A. Registered with the shared address, each would ask it: A would ask
// itself. Each skips an instance registering its own URL (never asking
// itself), so only --peer-url's per-instance URLs make them peers: then A
// fetches what B holds from B and B what A holds from A, verified, and
// neither asks itself or the load balancer.
func TestPeersBehindOneAddress(t *testing.T) {
	db := filepath.Join(t.TempDir(), "cure.db")
	a, b := newPeerInstance(t, db, "a"), newPeerInstance(t, db, "b")
	target, _ := url.Parse(a.hs.URL)
	var lbHits atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lbHits.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	defer lb.Close()
	onA := []byte(strings.Repeat("on a ", 3000))
	onB := []byte(strings.Repeat("on b ", 3000))
	hA, hB := importBytes(t, a.dir, onA), importBytes(t, b.dir, onB)

	// The shared address registered by both (no --peer-url): not asked.
	a.register(t, lb.URL)
	b.register(t, lb.URL)
	if code, _ := get(t, a.hs.URL+"/artifacts/sha256/"+hB); code != http.StatusNotFound {
		t.Fatalf("A's fetch with only the shared address registered: %d, want 404 (nobody else to ask)", code)
	}
	if lbHits.Load() != 0 || a.peerHits.Load() != 0 || a.sharedLog.Load() != 1 {
		t.Fatalf("load balancer asked %d times, A asked itself %d times, shared URL reported %d times; want 0, 0, 1",
			lbHits.Load(), a.peerHits.Load(), a.sharedLog.Load())
	}

	// Per-instance peer URLs: each fetches from the other.
	a.register(t, a.hs.URL)
	b.register(t, b.hs.URL+"/")
	if code, body := get(t, a.hs.URL+"/artifacts/sha256/"+hB); code != http.StatusOK || body != string(onB) {
		t.Fatalf("A serving B's artifact: %d, %d bytes", code, len(body))
	}
	if code, body := get(t, b.hs.URL+"/artifacts/sha256/"+hA); code != http.StatusOK || body != string(onA) {
		t.Fatalf("B serving A's artifact: %d, %d bytes", code, len(body))
	}
	if a.peerHits.Load() != 1 || b.peerHits.Load() != 1 || lbHits.Load() != 0 {
		t.Fatalf("peer fetches: A got %d, B got %d, the load balancer %d; want 1, 1, 0", a.peerHits.Load(), b.peerHits.Load(), lbHits.Load())
	}
	// A hash nobody holds: A asks B once, never itself.
	missing := strings.Repeat("cd", 32)
	if code, _ := get(t, a.hs.URL+"/artifacts/sha256/"+missing); code != http.StatusNotFound {
		t.Fatalf("a hash nobody holds: %d, want 404", code)
	}
	if a.peerHits.Load() != 1 || b.peerHits.Load() != 2 {
		t.Fatalf("after a miss: A asked %d times (want 1: B's fetch only), B %d (want 2)", a.peerHits.Load(), b.peerHits.Load())
	}
	all, err := a.st.Instances(context.Background(), time.Minute)
	if err != nil || !slices.EqualFunc(all, []string{a.hs.URL, b.hs.URL + "/"}, func(i store.InstanceInfo, u string) bool { return i.ArtifactURL == u }) {
		t.Fatalf("registry %+v %v", all, err)
	}
}
