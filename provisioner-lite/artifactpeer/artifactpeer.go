// Package artifactpeer makes every coordinator instance able to serve any
// content-addressed artifact: on a local miss for a sha256, the artifact is
// fetched from a peer instance (the instance registry in the store names
// their artifact base URLs) or from an object-store mirror (GET
// <mirror>/<sha256>), its hash verified while it streams into a temp file
// in the store, then renamed into place. A source is never trusted: bytes
// whose sha256 is not the name asked for are refused (and the source
// logged), and the next source is tried. Concurrent misses of one hash
// share one fetch.
package artifactpeer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// PeerHeader marks a fetch by a peer instance: the answering instance
// serves only what it holds, never fetching in turn (two instances missing
// one artifact would otherwise ask each other in a loop).
const PeerHeader = "X-Cure-Peer-Fetch"

// ErrNotFound is wrapped by Ensure when no source has the artifact.
var ErrNotFound = errors.New("artifact not found at any peer or mirror")

// Source is where an artifact may be fetched: GET BaseURL + "/" + sha256.
type Source struct {
	Name    string // the peer instance's id, or "mirror"
	BaseURL string
}

// Config configures a Filler.
type Config struct {
	Dir string // the artifact store: <Dir>/sha256/<hex>
	// Peers lists the other instances' artifact sources, asked in order
	// before the mirror (nil: none).
	Peers func(ctx context.Context) ([]Source, error)
	// Mirror is an object store's base URL ("": none): GET Mirror/<sha256>.
	Mirror string
	// Timeout bounds one fetch from one source, whole (default 30 min);
	// ConnectTimeout its connection and response headers (default 10 s).
	Timeout, ConnectTimeout time.Duration
	// MaxBytes bounds an artifact (default 1 TiB): a source that streams
	// more is cut.
	MaxBytes int64
	Client   *http.Client // nil: one with the timeouts above
	Log      *slog.Logger
	// Fetched, if set, hears of each artifact fetched and verified, with
	// its source's name and size (metrics).
	Fetched func(source string, bytes int64)
}

// Filler fetches missing artifacts into the store. Create it with New.
type Filler struct {
	cfg Config
	mu  sync.Mutex
	// inflight: one fetch per hash; later callers wait for its result.
	inflight map[string]*call
}

type call struct {
	done chan struct{}
	err  error
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// New checks cfg.
func New(cfg Config) (*Filler, error) {
	if cfg.Dir == "" {
		return nil, errors.New("artifactpeer: Config.Dir is empty")
	}
	if cfg.Mirror != "" && !strings.HasPrefix(cfg.Mirror, "http://") && !strings.HasPrefix(cfg.Mirror, "https://") {
		return nil, fmt.Errorf("--artifact-mirror %q: want an http:// or https:// base URL", textsafe.RedactURL(cfg.Mirror))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 40
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Client == nil {
		d := &net.Dialer{Timeout: cfg.ConnectTimeout}
		cfg.Client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DialContext: d.DialContext,
			TLSHandshakeTimeout: cfg.ConnectTimeout, ResponseHeaderTimeout: cfg.ConnectTimeout, IdleConnTimeout: time.Minute}}
	}
	return &Filler{cfg: cfg, inflight: map[string]*call{}}, nil
}

// Path is where the artifact with that sha256 lives in the store.
func (f *Filler) Path(sha256hex string) string { return filepath.Join(f.cfg.Dir, "sha256", sha256hex) }

// Ensure makes the artifact present in the store: at once if it is,
// otherwise fetched and verified (one fetch per hash however many ask).
// ctx bounds the caller's wait only: a fetch others wait for goes on.
func (f *Filler) Ensure(ctx context.Context, sha256hex string) error {
	if !hexRE.MatchString(sha256hex) {
		return fmt.Errorf("artifact name %q: want a sha256 (64 lowercase hex digits)", textsafe.BoundedLine(sha256hex, 80))
	}
	if _, err := os.Stat(f.Path(sha256hex)); err == nil {
		return nil
	}
	f.mu.Lock()
	c, ok := f.inflight[sha256hex]
	if !ok {
		c = &call{done: make(chan struct{})}
		f.inflight[sha256hex] = c
		go func() {
			c.err = f.fetch(sha256hex)
			f.mu.Lock()
			delete(f.inflight, sha256hex)
			f.mu.Unlock()
			close(c.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("artifact sha256:%s: %w", sha256hex, ctx.Err())
	}
}

// sources are the peers, then the mirror.
func (f *Filler) sources(ctx context.Context) []Source {
	var out []Source
	if f.cfg.Peers != nil {
		peers, err := f.cfg.Peers(ctx)
		if err != nil {
			f.cfg.Log.Warn("artifact peers not listed: trying the mirror only", "err", err)
		}
		out = append(out, peers...)
	}
	if f.cfg.Mirror != "" {
		out = append(out, Source{Name: "mirror", BaseURL: f.cfg.Mirror})
	}
	return out
}

// fetch tries each source in turn until one gives the artifact verified.
func (f *Filler) fetch(sha256hex string) error {
	lctx, cancel := context.WithTimeout(context.Background(), f.cfg.ConnectTimeout)
	srcs := f.sources(lctx)
	cancel()
	if len(srcs) == 0 {
		return fmt.Errorf("artifact sha256:%s: %w (no peer instance registered, no --artifact-mirror)", sha256hex, ErrNotFound)
	}
	var tried []string
	found := false
	for _, src := range srcs {
		n, err := f.fetchFrom(src, sha256hex)
		if err == nil {
			f.cfg.Log.Info("artifact fetched and verified", "sha256", sha256hex, "source", src.Name, "url", textsafe.RedactURL(src.BaseURL), "bytes", n)
			if f.cfg.Fetched != nil {
				f.cfg.Fetched(src.Name, n)
			}
			return nil
		}
		if !errors.Is(err, ErrNotFound) {
			found = true
		}
		tried = append(tried, fmt.Sprintf("%s: %v", src.Name, err))
	}
	if !found {
		return fmt.Errorf("artifact sha256:%s: %w (%s)", sha256hex, ErrNotFound, strings.Join(tried, "; "))
	}
	return fmt.Errorf("artifact sha256:%s: no source gave it verified (%s)", sha256hex, strings.Join(tried, "; "))
}

// errMismatch is a source's bytes that are not the artifact asked for.
var errMismatch = errors.New("content does not match its sha256: refused")

// fetchFrom streams the artifact from src into a temp file, hashing it,
// and renames it into the store only if the hash is the one asked for.
func (f *Filler) fetchFrom(src Source, sha256hex string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	u := strings.TrimRight(src.BaseURL, "/") + "/" + sha256hex
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fmt.Errorf("request %s: %w", textsafe.RedactURL(u), err)
	}
	req.Header.Set(PeerHeader, "1")
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", textsafe.RedactURL(u), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("GET %s: %s", textsafe.RedactURL(u), resp.Status)
	}
	dir := filepath.Join(f.cfg.Dir, "sha256")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("artifact store %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".fetch-*")
	if err != nil {
		return 0, fmt.Errorf("artifact store %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err == nil && n > f.cfg.MaxBytes {
		err = fmt.Errorf("over %d bytes", f.cfg.MaxBytes)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d bytes: %w", textsafe.RedactURL(u), n, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha256hex {
		f.cfg.Log.Warn("artifact source served bytes of another sha256: refused", "source", src.Name, "url", textsafe.RedactURL(u),
			"want", sha256hex, "got", got, "bytes", n)
		return n, fmt.Errorf("%w (got sha256:%s)", errMismatch, got)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return n, fmt.Errorf("artifact store: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.Path(sha256hex)); err != nil {
		return n, fmt.Errorf("artifact store: %w", err)
	}
	return n, nil
}

// Peer is an instance as the registry lists it: its id and the base URL
// other instances reach it at (--peer-url).
type Peer struct{ ID, URL string }

// PeerSources picks the sources to ask among the registered instances:
// each other instance's URL once, with path appended (the boot server's
// artifact path). An instance is never asked by itself: its own id is
// skipped, and so is any instance registering its own URL (a shared
// address behind a load balancer, which could land on this very
// instance); those are returned in shared so the caller can say so.
func PeerSources(self Peer, registered []Peer, path string) (srcs []Source, shared []string) {
	norm := func(u string) string { return strings.TrimRight(u, "/") }
	own := norm(self.URL)
	seen := map[string]bool{}
	for _, p := range registered {
		u := norm(p.URL)
		switch {
		case p.ID == self.ID || u == "":
		case u == own:
			shared = append(shared, p.ID)
		case !seen[u]:
			seen[u] = true
			srcs = append(srcs, Source{Name: p.ID, BaseURL: u + path})
		}
	}
	return srcs, shared
}
