package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// A real receiver answers 503 to the first attempt, then checks the
// signature and timestamp of the retry and takes it.
func TestWebhookSignedRetriedAfter503(t *testing.T) {
	var mu sync.Mutex
	var calls int
	var got []Payload
	var deliveries []string
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		calls++
		deliveries = append(deliveries, r.Header.Get(HeaderDelivery))
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if err := Verify(secret, r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("receiver: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Header.Get(HeaderEvent) != EventRunAttention || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var p Payload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("body: %v", err)
		}
		got = append(got, p)
		close(done)
	}))
	defer srv.Close()
	var results []string
	n, err := New(Config{URLs: []string{srv.URL + "/hook"}, Secret: secret, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Result: func(r string) { mu.Lock(); results = append(results, r); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	n.Notify(Payload{Event: EventRunAttention, RunID: "run-1", NodeID: "node-1", Status: "attention", SKU: "h100"})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
	n.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 || len(got) != 1 || got[0].RunID != "run-1" || got[0].SKU != "h100" || got[0].Delivery == "" {
		t.Fatalf("calls %d, got %+v", calls, got)
	}
	if deliveries[0] != deliveries[1] || deliveries[0] != got[0].Delivery {
		t.Errorf("delivery ids %v, body %s: one id across retries", deliveries, got[0].Delivery)
	}
	if strings.Join(results, ",") != "retried,delivered" {
		t.Errorf("results %v", results)
	}
}

// A 4xx other than 408/429 is not retried; attempts stop at the budget.
func TestWebhookGivesUp(t *testing.T) {
	for _, tc := range []struct {
		code, attempts, want int
	}{{400, 5, 1}, {500, 3, 3}, {429, 2, 2}} {
		var mu sync.Mutex
		calls := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls++
			mu.Unlock()
			w.WriteHeader(tc.code)
		}))
		n, err := New(Config{URLs: []string{srv.URL}, Secret: secret, Attempts: tc.attempts, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		n.Notify(Payload{Event: EventRunEnded, RunID: "r"})
		n.Close(context.Background()) // waits for the queued delivery to finish
		srv.Close()
		if calls != tc.want {
			t.Errorf("HTTP %d, %d attempts allowed: %d calls, want %d", tc.code, tc.attempts, calls, tc.want)
		}
	}
}

// Notify never blocks: past the queue, notifications are dropped.
func TestWebhookQueueBounded(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer srv.Close()
	var mu sync.Mutex
	dropped := 0
	n, err := New(Config{URLs: []string{srv.URL}, Secret: secret, Queue: 3, Workers: 1, Attempts: 1,
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Result: func(r string) { mu.Lock(); defer mu.Unlock(); dropped += map[bool]int{true: 1}[r == "dropped"] }})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		n.Notify(Payload{Event: EventRunEnded}) // returns at once even with the receiver stuck
	}
	mu.Lock()
	d := dropped
	mu.Unlock()
	if d < 16 || d > 17 { // 3 queued, at most 1 taken by the worker
		t.Errorf("dropped %d of 20 with a queue of 3", d)
	}
	close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.Close(ctx)
}

func TestVerifyRefuses(t *testing.T) {
	body := []byte(`{"event":"run.ended"}`)
	now := time.Unix(1_764_000_000, 0)
	ts := "1764000000"
	sig := Sign(secret, ts, body)
	if err := Verify(secret, ts, sig, body, now, time.Minute); err != nil {
		t.Fatalf("good delivery refused: %v", err)
	}
	for name, err := range map[string]error{
		"tampered body": Verify(secret, ts, sig, []byte(`{"event":"run.endeD"}`), now, time.Minute),
		"other secret":  Verify([]byte("another-secret-of-16+"), ts, sig, body, now, time.Minute),
		"replayed late": Verify(secret, ts, sig, body, now.Add(10*time.Minute), time.Minute),
		"timestamp":     Verify(secret, "1764000001", sig, body, now, time.Minute),
		"not a number":  Verify(secret, "yesterday", sig, body, now, time.Minute),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	if _, err := New(Config{Secret: []byte("short")}); err == nil {
		t.Error("short secret accepted")
	}
	for _, u := range []string{"ftp://x/", "https://user:pw@x/", "/relative", "http://"} {
		if ValidateURL(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if ValidateURL("https://hooks.example.com/cure?x=1") != nil {
		t.Error("good URL refused")
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "webhook.secret")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := LoadSecret(p, log)
	if err != nil || len(a) != 64 {
		t.Fatalf("created %q, %v", a, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	b, err := LoadSecret(p, log)
	if err != nil || string(a) != string(b) {
		t.Errorf("reloaded %q, %v", b, err)
	}
	os.Chmod(p, 0o644)
	if _, err := LoadSecret(p, log); err == nil {
		t.Error("world-readable secret accepted")
	}
}

func TestNotifyAfterCloseDrops(t *testing.T) {
	n, err := New(Config{URLs: []string{"http://127.0.0.1:1/"}, Secret: secret, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	n.Close(context.Background())
	n.Notify(Payload{Event: EventRunEnded}) // no panic
	n.Close(context.Background())
	var nilN *Notifier
	nilN.Notify(Payload{})
	nilN.Close(context.Background())
}
