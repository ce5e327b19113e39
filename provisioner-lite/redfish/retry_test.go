package redfish

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryTransport(t *testing.T) {
	var calls atomic.Int32
	var failFirst atomic.Int32
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if failFirst.Add(-1) >= 0 {
			if code.Load() == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(int(code.Load()))
			return
		}
		b := make([]byte, 16)
		n, _ := r.Body.Read(b)
		w.Write([]byte("ok:" + string(b[:n])))
	}))
	defer srv.Close()
	var waits []time.Duration
	tr := newRetryTransport(http.DefaultTransport)
	tr.policy.Sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	c := &http.Client{Transport: tr}
	do := func(method, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL, strings.NewReader(body))
		if body == "" {
			req, _ = http.NewRequest(method, srv.URL, nil)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}

	// 503 twice, then served: a POST's body is replayed; Retry-After is honoured.
	code.Store(503)
	failFirst.Store(2)
	calls.Store(0)
	if st, body := do(http.MethodPost, "login"); st != 200 || body != "ok:login" || calls.Load() != 3 {
		t.Fatalf("503 twice: %d %q after %d calls", st, body, calls.Load())
	}
	if len(waits) != 2 || waits[0] != time.Second {
		t.Fatalf("waits %v, want two of Retry-After 1s", waits)
	}
	// A 502 on a POST is not retried (the BMC may have acted); on a GET it is.
	code.Store(502)
	failFirst.Store(1)
	calls.Store(0)
	if st, _ := do(http.MethodPost, "update"); st != 502 || calls.Load() != 1 {
		t.Fatalf("502 on POST: %d after %d calls; want no retry", st, calls.Load())
	}
	failFirst.Store(1)
	calls.Store(0)
	waits = nil
	if st, _ := do(http.MethodGet, ""); st != 200 || calls.Load() != 2 {
		t.Fatalf("502 on GET: %d after %d calls; want one retry", st, calls.Load())
	}
	if len(waits) != 1 || waits[0] > tr.policy.Base {
		t.Fatalf("jittered wait %v, want within [0, %v]", waits, tr.policy.Base)
	}
	// A BMC that never recovers: bounded attempts, the last answer returned.
	code.Store(503)
	failFirst.Store(100)
	calls.Store(0)
	if st, _ := do(http.MethodGet, ""); st != 503 || calls.Load() != int32(tr.policy.Attempts) {
		t.Fatalf("persistent 503: %d after %d calls; want %d attempts", st, calls.Load(), tr.policy.Attempts)
	}
}
