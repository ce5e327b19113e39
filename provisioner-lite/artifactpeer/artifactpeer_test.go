package artifactpeer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// server serves body for any path, counting requests and checking that
// each carries the peer header.
func server(t *testing.T, body []byte, status int, delay time.Duration, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get(PeerHeader) != "1" {
			t.Errorf("fetch without %s", PeerHeader)
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A peer serving other bytes under the hash is refused and logged, a peer
// that stalls is cut by the timeout, one that lacks it is skipped, and the
// mirror's verified copy lands in the store; ten concurrent misses of the
// hash make one fetch.
func TestFillVerifiesAndSharesOneFetch(t *testing.T) {
	want := bytes.Repeat([]byte("artifact "), 50000)
	h := sum(want)
	var badHits, slowHits, missHits, mirrorHits atomic.Int64
	bad := server(t, []byte("not the artifact"), http.StatusOK, 0, &badHits)
	slow := server(t, want, http.StatusOK, 5*time.Second, &slowHits)
	miss := server(t, nil, http.StatusNotFound, 0, &missHits)
	mirror := server(t, want, http.StatusOK, 200*time.Millisecond, &mirrorHits)
	lb := &logBuf{}
	dir := t.TempDir()
	f, err := New(Config{Dir: dir, Mirror: mirror.URL, Timeout: 700 * time.Millisecond, Log: slog.New(slog.NewTextHandler(lb, nil)),
		Peers: func(context.Context) ([]Source, error) {
			return []Source{{"bad", bad.URL}, {"slow", slow.URL}, {"miss", miss.URL}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := f.Ensure(ctx, h); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(f.Path(h))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("store copy: %d bytes, %v", len(got), err)
	}
	for name, n := range map[string]int64{"bad": badHits.Load(), "slow": slowHits.Load(), "miss": missHits.Load(), "mirror": mirrorHits.Load()} {
		if n != 1 {
			t.Errorf("%s asked %d times, want once (one fetch for ten callers)", name, n)
		}
	}
	log := lb.String()
	if !strings.Contains(log, "served bytes of another sha256: refused") || !strings.Contains(log, "source=bad") {
		t.Errorf("the bad peer was not logged:\n%s", log)
	}
	if !strings.Contains(log, "artifact fetched and verified") || !strings.Contains(log, "source=mirror") {
		t.Errorf("the mirror's fetch was not logged:\n%s", log)
	}
	// Present now: no fetch at all.
	if err := f.Ensure(context.Background(), h); err != nil || mirrorHits.Load() != 1 {
		t.Fatalf("second Ensure: %v, mirror hits %d", err, mirrorHits.Load())
	}
	entries, _ := os.ReadDir(dir + "/sha256")
	if len(entries) != 1 {
		t.Errorf("store holds %d entries, want the artifact alone (temp files removed)", len(entries))
	}
}

// Nobody has it: ErrNotFound; only wrong copies: an error that is not
// ErrNotFound, and nothing lands in the store.
func TestFillNotFoundAndOnlyWrongCopies(t *testing.T) {
	h := sum([]byte("x"))
	var hits atomic.Int64
	miss := server(t, nil, http.StatusNotFound, 0, &hits)
	f, _ := New(Config{Dir: t.TempDir(), Mirror: miss.URL, Log: slog.New(slog.DiscardHandler)})
	if err := f.Ensure(context.Background(), h); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Ensure: %v, want ErrNotFound", err)
	}
	bad := server(t, []byte("y"), http.StatusOK, 0, &hits)
	f, _ = New(Config{Dir: t.TempDir(), Mirror: bad.URL, Log: slog.New(slog.DiscardHandler)})
	err := f.Ensure(context.Background(), h)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Ensure from a wrong copy: %v", err)
	}
	if _, err := os.Stat(f.Path(h)); err == nil {
		t.Fatal("a wrong copy landed in the store")
	}
	if err := f.Ensure(context.Background(), "../../etc/passwd"); err == nil {
		t.Fatal("a name that is not a sha256 was fetched")
	}
	if _, err := New(Config{Dir: "d", Mirror: "ftp://x"}); err == nil {
		t.Fatal("an ftp mirror was accepted")
	}
}

// PeerSources never lists this instance: not by its id, not by its URL
// (with or without a trailing slash: a shared address that may land
// here), reported as shared; a URL registered twice is asked once, an
// instance without a URL not at all, the registry's order kept.
func TestPeerSourcesSkipsSelf(t *testing.T) {
	self := Peer{ID: "a", URL: "http://10.0.0.1:8080/"}
	reg := []Peer{
		{"a", "http://10.0.0.9:8080"}, // this id, whatever URL
		{"b", "http://10.0.0.2:8080"},
		{"c", "http://10.0.0.1:8080"}, // this URL
		{"d", ""},
		{"e", "http://10.0.0.2:8080/"},
		{"f", "https://10.0.0.3:8444"},
	}
	srcs, shared := PeerSources(self, reg, "/artifacts/sha256")
	want := []Source{{"b", "http://10.0.0.2:8080/artifacts/sha256"}, {"f", "https://10.0.0.3:8444/artifacts/sha256"}}
	if len(srcs) != len(want) || srcs[0] != want[0] || srcs[1] != want[1] {
		t.Errorf("sources %+v, want %+v", srcs, want)
	}
	if len(shared) != 1 || shared[0] != "c" {
		t.Errorf("shared %q, want [c]", shared)
	}
	if srcs, _ := PeerSources(self, nil, "/x"); len(srcs) != 0 {
		t.Errorf("no registry: %+v", srcs)
	}
}
