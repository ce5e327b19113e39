package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// manager finds the BMC's own Manager: ManagerType BMC first, else the
// first one listed.
func (c *Client) manager(api *gofish.APIClient) (*schemas.Manager, error) {
	ms, err := api.Service.Managers()
	if err != nil {
		return nil, fmt.Errorf("list Managers: %w", err)
	}
	if len(ms) == 0 {
		return nil, errors.New("the BMC lists no Manager under /redfish/v1/Managers")
	}
	for _, m := range ms {
		if m.ManagerType == schemas.BMCManagerType {
			return m, nil
		}
	}
	return ms[0], nil
}

// ResetManager reboots the BMC itself (activating staged BMC firmware),
// with the closest allowable ResetType. Sessions die with it: follow with
// WaitBMC. An *UnknownOutcomeError means it may be rebooting anyway.
func (c *Client) ResetManager(ctx context.Context, resetType string) error {
	if resetType == "" {
		resetType = "GracefulRestart"
	}
	var target, rt string
	err := c.call(ctx, "read Manager", func(api *gofish.APIClient) error {
		m, err := c.manager(api)
		if err != nil {
			return err
		}
		var allowed []string
		target, allowed, err = parseManagerReset(m.RawData)
		if err != nil {
			return fmt.Errorf("Manager %s: %w", m.ODataID, err)
		}
		rt, err = chooseReset(resetType, allowed)
		return err
	})
	if err != nil {
		return err
	}
	_, err = c.mutate(ctx, "Manager.Reset "+rt, target, nil, false, func(api *gofish.APIClient) (*http.Response, error) {
		return api.Post(target, map[string]any{"ResetType": rt})
	})
	var ue *UnknownOutcomeError
	if err == nil || errors.As(err, &ue) {
		c.mu.Lock()
		c.resetAt = time.Now()
		c.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("redfish %s: BMC reset: %w", c.ep.URL, err)
	}
	c.log.Info("BMC reset requested", "type", rt)
	return nil
}

// parseManagerReset reads a Manager's #Manager.Reset action: its target (a
// path on the BMC) and the allowable ResetType values.
func parseManagerReset(raw []byte) (target string, allowed []string, err error) {
	var doc struct {
		Actions struct {
			Reset *struct {
				Target  string    `json:"target"`
				Allowed allowList `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#Manager.Reset"`
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", nil, fmt.Errorf("parse: %w", err)
	}
	if doc.Actions.Reset == nil || doc.Actions.Reset.Target == "" {
		return "", nil, fmt.Errorf("%w: no #Manager.Reset action", ErrNotSupported)
	}
	if target, err = bmcPath(doc.Actions.Reset.Target); err != nil {
		return "", nil, fmt.Errorf("#Manager.Reset target: %w", err)
	}
	return target, normalizeAllowed(doc.Actions.Reset.Allowed, resetTypes), nil
}

// WaitBMC waits, within budget, for the BMC to come back after a reset:
// first (after ResetManager) until it is seen going away — refused, 503,
// or our session rejected — so a BMC that has not started rebooting is
// not taken for one that is back; then until the service root answers,
// a new session opens and the system reads.
func (c *Client) WaitBMC(ctx context.Context, budget time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	poll := min(max(budget/50, 100*time.Millisecond), 2*time.Second)
	c.mu.Lock()
	resetAt := c.resetAt
	c.resetAt = time.Time{}
	c.mu.Unlock()
	sleep := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
			return true
		}
	}
	if !resetAt.IsZero() {
		window := min(budget/3, time.Minute)
		for {
			if err := c.probeSession(ctx); err != nil {
				c.log.Info("BMC went away for its reset", "after", time.Since(resetAt).Round(time.Millisecond), "err", err)
				break
			}
			if time.Since(resetAt) > window {
				c.log.Warn("BMC never looked reset (its session still works); carrying on", "waited", window)
				break
			}
			if !sleep() {
				return fmt.Errorf("redfish %s: waiting for the BMC to start its reset: %w", c.ep.URL, ctx.Err())
			}
		}
	}
	var last error
	for {
		last = c.probeRoot(ctx)
		if last == nil {
			if last = c.login(ctx); last == nil {
				last = c.call(ctx, "find system", func(api *gofish.APIClient) error {
					_, err := c.system(api)
					return err
				})
				if last == nil {
					c.log.Info("BMC is back")
					return nil
				}
			}
		}
		if !sleep() {
			return fmt.Errorf("redfish %s: BMC not back within %v: last error: %w", c.ep.URL, budget, last)
		}
	}
}

// probeSession reads the system with the current session, without the
// re-login call() would do: any failure means the BMC is (or was) away.
func (c *Client) probeSession(ctx context.Context) error {
	c.mu.Lock()
	api, uri := c.api, c.sysURI
	c.mu.Unlock()
	if uri == "" {
		uri = "/redfish/v1/Systems"
	}
	cctx, cancel := context.WithTimeout(ctx, min(c.o.Timeout, 5*time.Second))
	defer cancel()
	resp, err := api.WithContext(cctx).Get(uri)
	if err != nil {
		return err
	}
	return schemas.CleanupHTTPResponse(resp)
}

// probeRoot GETs the service root, which needs no credentials.
func (c *Client) probeRoot(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, min(c.o.Timeout, 5*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, c.ep.URL+"/redfish/v1/", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("service root: HTTP %s", resp.Status)
	}
	return nil
}
