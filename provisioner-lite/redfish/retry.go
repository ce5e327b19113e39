package redfish

import (
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// BMCs shed load with 503 (often with Retry-After) and their front proxies
// answer 502/504 while the Redfish service restarts. One such answer must not
// cost a pipeline phase attempt: the transport retries it, a few times, with
// backoff and full jitter so a rack of BMCs is not polled in lockstep.
//
// 503 means the request was not processed, so any request whose body can be
// replayed is retried; 502 and 504 may come after the BMC acted, so only
// idempotent methods are.

// retryTransport retries transient BMC answers.
type retryTransport struct {
	base     http.RoundTripper
	attempts int
	baseWait time.Duration
	maxWait  time.Duration
	sleep    func(r *http.Request, d time.Duration) error // injectable in tests
	onRetry  func(status int)                             // metrics; nil: none
}

func newRetryTransport(base http.RoundTripper) *retryTransport {
	return &retryTransport{base: base, attempts: 5, baseWait: 250 * time.Millisecond, maxWait: 5 * time.Second, sleep: sleepReq}
}

func sleepReq(r *http.Request, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on to the
// transport beneath (without it, Close and the pool's release between
// steps left every kept-alive connection open until its idle timeout).
func (t *retryTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *retryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := t.base.RoundTrip(r)
		if err != nil || attempt >= t.attempts || !t.retryable(r, resp) {
			return resp, err
		}
		if t.onRetry != nil {
			t.onRetry(resp.StatusCode)
		}
		wait := t.backoff(attempt, resp.Header.Get("Retry-After"))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if r.Body != nil && r.GetBody != nil {
			body, err := r.GetBody()
			if err != nil {
				return nil, err
			}
			r = r.Clone(r.Context())
			r.Body = body
		}
		if err := t.sleep(r, wait); err != nil {
			return nil, err
		}
	}
}

func (t *retryTransport) retryable(r *http.Request, resp *http.Response) bool {
	replayable := r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		return replayable
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return false
}

// backoff honours Retry-After (in seconds, capped) and otherwise waits
// uniformly in [0, min(max, base·2^(attempt-1))].
func (t *retryTransport) backoff(attempt int, retryAfter string) time.Duration {
	if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, t.maxWait)
	}
	d := t.baseWait << (attempt - 1)
	d = min(d, t.maxWait)
	return time.Duration(rand.Int64N(int64(d) + 1))
}
