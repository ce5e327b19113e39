// Package phonehome posts the host OS's "I am up" callback the way
// cloud-init's phone_home module does (form-encoded POST to the configured
// URL), plus boot_id and uptime_ms, with the URL's token also sent as a
// bearer token, retrying with capped exponential backoff.
package phonehome

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/retry"
)

// Report is what the host OS says about itself.
type Report struct {
	InstanceID string
	Hostname   string
	BootID     string
	Uptime     time.Duration
}

// Form encodes r as cloud-init's phone_home does for post: all (minus the
// SSH host keys this host OS does not have).
func (r Report) Form() url.Values {
	v := url.Values{}
	v.Set("instance_id", r.InstanceID)
	v.Set("hostname", r.Hostname)
	v.Set("fqdn", r.Hostname)
	v.Set("boot_id", r.BootID)
	v.Set("uptime_ms", strconv.FormatInt(r.Uptime.Milliseconds(), 10))
	return v
}

// Options control retries; zero values mean defaults.
type Options struct {
	Tries      int           // default 10
	Timeout    time.Duration // per attempt, default 10s
	MinBackoff time.Duration // default 1s
	MaxBackoff time.Duration // default 30s
	Client     *http.Client  // default: a client with no global timeout (contexts bound each try)
}

// Post sends r to rawURL until a 2xx answer or tries run out. The token
// query parameter, when present, is also sent as "Authorization: Bearer".
func Post(ctx context.Context, rawURL string, r Report, o Options, log *slog.Logger) error {
	if o.Tries <= 0 {
		o.Tries = 10
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if log == nil {
		log = slog.Default()
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("phone_home url %q: %w", rawURL, err)
	}
	token := u.Query().Get("token")
	body := r.Form().Encode()
	policy := retry.Policy{Base: o.MinBackoff, Max: o.MaxBackoff, Jitter: retry.Half, Attempts: o.Tries}
	err = policy.Do(ctx, func(ctx context.Context, try int) error {
		err := postOnce(ctx, o, u.String(), token, body)
		if err == nil {
			log.Info("phone_home ok", "url", redact(u), "try", try, "instance_id", r.InstanceID)
			return nil
		}
		log.Warn("phone_home failed", "url", redact(u), "try", try, "of", o.Tries, "err", err)
		return err
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("phone_home to %s: %w", redact(u), err)
	}
	return fmt.Errorf("phone_home to %s: gave up after %d tries: %w", redact(u), o.Tries, err)
}

func postOnce(ctx context.Context, o Options, target, token, body string) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("expected 2xx, got %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// redact hides the token in logs: the console is not a secret channel.
func redact(u *url.URL) string {
	c := *u
	q := c.Query()
	if q.Has("token") {
		q.Set("token", "REDACTED")
		c.RawQuery = q.Encode()
	}
	return c.String()
}
