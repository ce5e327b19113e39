package bootserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/artifactpeer"
)

// Two instances' boot servers: B lacks an artifact A holds, fetches it
// from A on the first request (verified, kept) and serves it; a peer's own
// fetch of a hash B lacks is answered 404 without B fetching in turn.
func TestArtifactFilledFromPeer(t *testing.T) {
	newServer := func(fill func(context.Context, string) error) (*Server, *httptest.Server, string) {
		dir := t.TempDir()
		s, err := New(Config{ImageDir: t.TempDir(), ArtifactDir: dir, BaseURL: "http://10.0.2.2:8080", Fill: fill,
			Logger: slog.New(slog.DiscardHandler)}, &fakeCoordinator{})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		return s, hs, dir
	}
	_, a, aDir := newServer(nil)
	content := []byte(strings.Repeat("firmware image ", 4096))
	h := importBytes(t, aDir, content)

	var fills atomic.Int64
	var filler *artifactpeer.Filler
	_, b, bDir := newServer(func(ctx context.Context, sum string) error {
		fills.Add(1)
		return filler.Ensure(ctx, sum)
	})
	var err error
	filler, err = artifactpeer.New(artifactpeer.Config{Dir: bDir, Log: slog.New(slog.DiscardHandler),
		Peers: func(context.Context) ([]artifactpeer.Source, error) {
			return []artifactpeer.Source{{Name: "a", BaseURL: a.URL + "/artifacts/sha256"}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(b.URL + "/artifacts/sha256/" + h)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != string(content) {
		t.Fatalf("B served %s with %d bytes, want the artifact", resp.Status, len(body))
	}
	if _, err := os.Stat(ArtifactPath(bDir, h)); err != nil {
		t.Fatalf("B did not keep its verified copy: %v", err)
	}
	// A peer's fetch is answered from the store only.
	missing := strings.Repeat("ab", 32)
	req, _ := http.NewRequest(http.MethodGet, b.URL+"/artifacts/sha256/"+missing, nil)
	req.Header.Set(artifactpeer.PeerHeader, "1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || fills.Load() != 1 {
		t.Fatalf("a peer's fetch of a missing hash: %s, fills %d; want 404 and no fetch", resp.Status, fills.Load())
	}
	// Nobody has it: 404 naming the sources.
	resp, err = http.Get(b.URL + "/artifacts/sha256/" + missing)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an artifact nobody has: %s, want 404", resp.Status)
	}
}
