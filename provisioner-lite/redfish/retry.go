package redfish

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/cure-oss/cure/tools/retry"
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
	base    http.RoundTripper
	policy  retry.Policy     // attempts and backoff; its Sleep injectable in tests
	onRetry func(status int) // metrics; nil: none
}

func newRetryTransport(base http.RoundTripper) *retryTransport {
	return &retryTransport{base: base, policy: retry.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second, Attempts: 5}}
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on to the
// transport beneath (without it, Close and the pool's release between
// steps left every kept-alive connection open until its idle timeout).
func (t *retryTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip returns the first answer that is not transient, or the last
// one once the attempts are spent; a transport error is returned at once.
func (t *retryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var resp *http.Response
	err := t.policy.Do(r.Context(), func(_ context.Context, attempt int) error {
		req := r
		if attempt > 1 && r.Body != nil && r.GetBody != nil {
			body, err := r.GetBody()
			if err != nil {
				return retry.Permanent(err)
			}
			req = r.Clone(r.Context())
			req.Body = body
		}
		var err error
		if resp, err = t.base.RoundTrip(req); err != nil {
			return retry.Permanent(err)
		}
		if attempt >= t.policy.Attempts || !t.retryable(req, resp) {
			return nil
		}
		if t.onRetry != nil {
			t.onRetry(resp.StatusCode)
		}
		err = fmt.Errorf("BMC answered HTTP %d", resp.StatusCode)
		after := resp.Header.Get("Retry-After")
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp = nil
		// Retry-After in seconds is honoured, capped; otherwise the policy's
		// jittered backoff.
		if s, perr := strconv.Atoi(after); perr == nil && s >= 0 {
			return retry.After(min(time.Duration(s)*time.Second, t.policy.Max), err)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
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
