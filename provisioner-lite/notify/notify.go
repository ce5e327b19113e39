// Package notify delivers webhooks when a run ends or needs attention: a
// JSON payload signed with HMAC-SHA256 over a timestamp and the body (so a
// receiver can refuse forgeries and replays), retried with backoff and
// jitter, from a bounded queue that never blocks the pipeline.
//
// Signature (docs/OBSERVABILITY.md):
//
//	X-Cure-Timestamp: 1764000000                (Unix seconds of this attempt)
//	X-Cure-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//	X-Cure-Delivery:  <id, the same on every attempt: receivers dedupe on it>
//	X-Cure-Event:     run.ended | run.attention | node.pool
//
// A node.pool delivery announces a node's move in the day-2 pool
// (provisioner-lite/pool): pool_state and pool_from, the reason and who
// moved it, and since, when it moved (deliveries may arrive out of order:
// a receiver keeps the latest since per node).
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cryptorand "crypto/rand"

	"github.com/cure-oss/cure/tools/retry"
)

// Header names.
const (
	HeaderTimestamp = "X-Cure-Timestamp"
	HeaderSignature = "X-Cure-Signature"
	HeaderDelivery  = "X-Cure-Delivery"
	HeaderEvent     = "X-Cure-Event"
)

// Events.
const (
	EventRunEnded     = "run.ended"
	EventRunAttention = "run.attention"
	EventNodePool     = "node.pool"
)

// Payload is the JSON body.
type Payload struct {
	Event     string    `json:"event"`
	Delivery  string    `json:"delivery"`
	RunID     string    `json:"run_id"`
	NodeID    string    `json:"node_id"`
	SKU       string    `json:"sku,omitempty"`
	Mode      string    `json:"mode,omitempty"`
	Status    string    `json:"status,omitempty"`
	Phase     string    `json:"phase,omitempty"`
	Message   string    `json:"message,omitempty"`
	Reboots   int       `json:"reboots"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// node.pool: the node's pool state now and before ("" for not in the
	// pool), why, who moved it (an operator, the scheduler's certificate,
	// or "coordinator") and when. RunID is the run that moved it, if any.
	PoolState string    `json:"pool_state,omitempty"`
	PoolFrom  string    `json:"pool_from,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Actor     string    `json:"actor,omitempty"`
	Since     time.Time `json:"since,omitzero"`
}

// Config configures a Notifier; zero fields take the defaults.
type Config struct {
	URLs     []string
	Secret   []byte        // HMAC key (required)
	Queue    int           // pending deliveries held (default 1024); more are dropped
	Workers  int           // concurrent deliveries (default 2)
	Attempts int           // per URL (default 6)
	Timeout  time.Duration // one attempt (default 10s)
	// BaseDelay doubles per attempt up to MaxDelay, with full jitter
	// (defaults 1s, 1min).
	BaseDelay, MaxDelay time.Duration
	Client              *http.Client
	Log                 *slog.Logger
	// Result, if set, hears of each attempt: delivered, retried, failed
	// (attempts spent), dropped (queue full). Metrics; must not block.
	Result func(result string)
}

// Notifier queues and delivers webhooks.
type Notifier struct {
	cfg  Config
	q    chan Payload
	wg   sync.WaitGroup
	stop context.CancelFunc
	ctx  context.Context
	// mu guards closed: Notify after Close drops instead of panicking.
	mu     sync.RWMutex
	closed bool
}

// ValidateURL accepts http and https URLs with a host and no user info
// (credentials in a URL end up in logs).
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook %q: want an http:// or https:// URL with a host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("webhook %q: credentials in the URL would be logged; authenticate with the signature", u.Redacted())
	}
	return nil
}

// New starts the workers; Close stops them.
func New(cfg Config) (*Notifier, error) {
	if len(cfg.Secret) < 16 {
		return nil, errors.New("notify: the webhook secret must be at least 16 bytes")
	}
	for _, u := range cfg.URLs {
		if err := ValidateURL(u); err != nil {
			return nil, err
		}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 6
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.BaseDelay <= 0 {
		cfg.BaseDelay = time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Minute
	}
	if cfg.Client == nil {
		// No redirects: a receiver cannot bounce the signed payload elsewhere.
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Result == nil {
		cfg.Result = func(string) {}
	}
	ctx, stop := context.WithCancel(context.Background())
	n := &Notifier{cfg: cfg, q: make(chan Payload, cfg.Queue), stop: stop, ctx: ctx}
	for range cfg.Workers {
		n.wg.Add(1)
		go n.work()
	}
	return n, nil
}

// Notify queues p for every URL; it never blocks: when the queue is full
// the notification is dropped (counted and logged).
func (n *Notifier) Notify(p Payload) {
	if n == nil || len(n.cfg.URLs) == 0 {
		return
	}
	if p.Delivery == "" {
		p.Delivery = newID()
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.cfg.Result("dropped")
		return
	}
	select {
	case n.q <- p:
	default:
		n.cfg.Result("dropped")
		n.cfg.Log.Warn("webhook queue full: notification dropped", "event", p.Event, "run", p.RunID)
	}
}

// Close stops accepting work, lets queued deliveries try until ctx ends,
// then abandons the rest.
func (n *Notifier) Close(ctx context.Context) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.q)
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		n.stop()
		<-done
	}
	n.stop()
}

func (n *Notifier) work() {
	defer n.wg.Done()
	for p := range n.q {
		body, err := json.Marshal(p)
		if err != nil {
			continue
		}
		for _, u := range n.cfg.URLs {
			n.deliver(u, p, body)
		}
	}
}

func (n *Notifier) deliver(u string, p Payload, body []byte) {
	policy := retry.Policy{Base: n.cfg.BaseDelay, Max: n.cfg.MaxDelay, Attempts: n.cfg.Attempts,
		OnRetry: func(attempt int, err error, d time.Duration) {
			n.cfg.Result("retried")
			n.cfg.Log.Warn("webhook attempt failed; retrying", "url", redact(u), "run", p.RunID, "attempt", attempt, "in", d.Round(time.Millisecond), "err", err)
		}}
	tries := 0
	err := policy.Do(n.ctx, func(context.Context, int) error {
		tries++
		again, err := n.attempt(u, p, body)
		if err != nil && !again {
			return retry.Permanent(err)
		}
		return err
	})
	if err == nil {
		n.cfg.Result("delivered")
		return
	}
	n.cfg.Result("failed")
	n.cfg.Log.Error("webhook not delivered", "url", redact(u), "event", p.Event, "run", p.RunID, "attempts", tries, "err", err)
}

// attempt posts once; retry says whether another attempt may succeed
// (network errors, 408, 429, 5xx).
func (n *Notifier) attempt(u string, p Payload, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cure-provisioner-lite")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(n.cfg.Secret, ts, body))
	req.Header.Set(HeaderDelivery, p.Delivery)
	req.Header.Set(HeaderEvent, p.Event)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return true, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == 408 || resp.StatusCode == 429 || resp.StatusCode >= 500:
		return true, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return false, fmt.Errorf("HTTP %d (not retried)", resp.StatusCode)
}

// Sign is the X-Cure-Signature value of body sent at timestamp ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery as a receiver should: the signature over the
// timestamp and body, and the timestamp within tolerance of now (replays of
// an old delivery are refused; dedupe on X-Cure-Delivery within it).
func Verify(secret []byte, ts, sig string, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q: not Unix seconds", HeaderTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%s is %s away from now: replay or clock skew", HeaderTimestamp, d.Round(time.Second))
	}
	if subtle.ConstantTimeCompare([]byte(Sign(secret, ts, body)), []byte(sig)) != 1 {
		return errors.New("signature does not match")
	}
	return nil
}

// LoadSecret reads the webhook secret from path (its trimmed text is the
// key), creating a random one (0600) on first use. Receivers are given the
// same file's content.
func LoadSecret(path string, log *slog.Logger) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := cryptorand.Read(raw); err != nil {
			return nil, err
		}
		s := hex.EncodeToString(raw)
		if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("webhook secret %s: %w", path, err)
		}
		log.Info("webhook secret created: give its content to the webhook receivers to check X-Cure-Signature", "file", path)
		return []byte(s), nil
	}
	if err != nil {
		return nil, fmt.Errorf("webhook secret %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("webhook secret %s is readable by others (%v): chmod 600 it", path, st.Mode().Perm())
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, fmt.Errorf("webhook secret %s: %d bytes, want at least 16", path, len(s))
	}
	return []byte(s), nil
}

func newID() string {
	b := make([]byte, 12)
	_, _ = cryptorand.Read(b)
	return hex.EncodeToString(b)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable)"
	}
	p.RawQuery = "" // query strings often carry tokens
	return p.Redacted()
}
