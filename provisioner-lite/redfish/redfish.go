// Package redfish is the coordinator's BMC driver: power, one-time and
// persistent boot override, firmware inventory, out-of-band updates
// (SimpleUpdate, streamed multipart push, tasks, BMC reset and return),
// BIOS attributes through @Redfish.Settings, and lost answers reported as
// ErrUnknownOutcome. It sits on gofish, with a
// timeout on every call, session login (Basic auth where sessions are not
// offered), one re-login when a session dies, and logout on Close.
package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Endpoint is one BMC and how its TLS identity is checked. By default the
// BMC's chain and host name verify against RootCAs; with a Fingerprint
// exactly that certificate is accepted; Insecure accepts anything.
type Endpoint struct {
	URL      string // https://bmc.example:443 (no /redfish/v1)
	Username string
	Password string
	// RootCAs verifies the BMC's chain and host name; nil: the system roots.
	RootCAs *x509.CertPool
	// Fingerprint pins the BMC's leaf certificate: "sha256:" + the hex
	// SHA-256 of its DER (any form ParseFingerprint reads). Chain and host
	// name are then not checked: BMCs are addressed by IP and self-signed.
	Fingerprint string
	// Insecure skips verification and allows http://. Only for a node whose
	// inventory says so; every Connect warns.
	Insecure bool
	// PasswordFrom says where Password came from, for the message of a
	// refused login ("read from the coordinator's environment variable
	// BMC_PW (passwordEnv)"); never the password itself.
	PasswordFrom string
}

// Options tune the client.
type Options struct {
	Timeout time.Duration // per call, default 30s
	// UploadTimeout bounds a MultipartPush (the whole image transfer plus
	// the answer), default 30 min.
	UploadTimeout time.Duration
	Logger        *slog.Logger
	HTTPClient    *http.Client // default: one with dial/TLS/header timeouts
	// BootMode is the BootSourceOverrideMode policy of SetBootOverride
	// (default auto: UEFI network boots where the BMC offers UEFI).
	BootMode BootModePolicy
	// HTTPBootURI is what a UefiHttp override sets as Boot.HttpBootUri on
	// BMCs that have the property (the iPXE EFI build's URL), so UEFI HTTP
	// boot needs no DHCP-supplied URL there.
	HTTPBootURI string
	// OnRetry, if set, is told the status of every answer the transport
	// retries (503, 502/504 on reads): metrics. It must not block.
	OnRetry func(status int)
}

// BootTarget is a BootSourceOverrideTarget.
type BootTarget string

const (
	BootPxe  BootTarget = "Pxe"
	BootHdd  BootTarget = "Hdd"
	BootNone BootTarget = "None" // clear the override: default boot order
	// BootUefiHttp is UEFI HTTP boot: the firmware loads an EFI binary
	// from an http URL (Boot.HttpBootUri where the BMC has it, else the
	// URL a DHCP server hands out to vendor class HTTPClient).
	BootUefiHttp BootTarget = "UefiHttp"
)

// BootModePolicy says which BootSourceOverrideMode a boot override sets.
type BootModePolicy string

const (
	// BootModeAuto: network boots in UEFI where the BMC shows UEFI support
	// (BootSourceOverrideMode@Redfish.AllowableValues, or the property
	// itself already UEFI), otherwise the mode is left as it is.
	BootModeAuto   BootModePolicy = "auto"
	BootModeUEFI   BootModePolicy = "uefi"
	BootModeLegacy BootModePolicy = "legacy"
)

// ParseBootModePolicy reads a --boot-mode value.
func ParseBootModePolicy(s string) (BootModePolicy, error) {
	switch p := BootModePolicy(strings.ToLower(s)); p {
	case BootModeAuto, BootModeUEFI, BootModeLegacy:
		return p, nil
	case "":
		return BootModeAuto, nil
	}
	return "", fmt.Errorf("boot mode %q: want auto, uefi or legacy", s)
}

// BootSourceOverrideMode values.
const (
	ModeUEFI   = "UEFI"
	ModeLegacy = "Legacy"
)

// ErrNotSupported marks requests the BMC cannot carry out as asked
// (missing allowable value); retrying will not help.
var ErrNotSupported = errors.New("not supported by this BMC")

// SystemInfo is the first ComputerSystem as the BMC reports it.
type SystemInfo struct {
	ID           string
	URI          string
	Serial       string
	UUID         string
	Manufacturer string
	Model        string
	PowerState   string
	ETag         string

	BootSourceOverrideTarget  BootTarget
	BootSourceOverrideEnabled string
	BootSourceOverrideMode    string // empty when the system has no Mode

	AllowedBootTargets []string
	AllowedBootEnabled []string
	AllowedBootModes   []string
	AllowedResetTypes  []string

	MACs []string // EthernetInterfaces (best effort)
}

// FirmwareItem is one SoftwareInventory member of the firmware inventory.
type FirmwareItem struct {
	ID, Name, Version, SoftwareID string
	Updateable                    bool
	// RelatedItems are the @odata.id links of the devices this firmware
	// runs on (a manifest may match on them when Ids are positions).
	RelatedItems []string
	// PendingVersion is a staged image waiting for activation, where the
	// BMC says so (the virtual BMC's Oem.CURE.PendingVersion); empty otherwise.
	PendingVersion string
}

// Client talks to one BMC. Safe for concurrent use.
type Client struct {
	ep    Endpoint
	o     Options
	log   *slog.Logger
	httpc *http.Client

	mu     sync.Mutex
	api    *gofish.APIClient
	basic  bool   // sessions unsupported: Basic auth on every request
	sysURI string // first ComputerSystem, found once
	closed bool
	// resetAt is when ResetManager was accepted (or may have been); WaitBMC
	// then first waits to see the BMC go away.
	resetAt time.Time
	// vendor is the service root's Vendor, else the system's Manufacturer.
	vendor string
	// invURI is UpdateService.FirmwareInventory, found once.
	invURI string
}

// Connect logs in to the BMC (a Redfish session, or Basic auth if the BMC
// offers no sessions) and finds its system.
func Connect(ctx context.Context, ep Endpoint, o Options) (*Client, error) {
	u, err := url.Parse(ep.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("redfish: endpoint URL %q: want https://host[:port]", ep.URL)
	}
	if ep.Username == "" {
		return nil, fmt.Errorf("redfish %s: endpoint Username is empty", ep.URL)
	}
	ep.URL = strings.TrimSuffix(ep.URL, "/")
	pol, err := endpointPolicy(ep, u)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.UploadTimeout <= 0 {
		o.UploadTimeout = 30 * time.Minute
	}
	c := &Client{ep: ep, o: o, log: o.Logger.With("bmc", ep.URL)}
	if ep.Insecure {
		// Every time, not once: the log of each run must show it.
		c.log.Warn("BMC TLS verification is OFF for this connection, as the node's inventory says (insecure: true): "+
			"anyone on the BMC network can impersonate the BMC and read its password", "scheme", u.Scheme)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = newHTTPClient(pol.config(), o.Timeout)
	}
	c.httpc = guardClient(hc, u, ep.URL, o.OnRetry)
	if err := c.login(ctx); err != nil {
		return nil, err
	}
	// Finding the system also proves the credentials under Basic auth.
	if err := c.call(ctx, "find system", func(api *gofish.APIClient) error {
		sys, err := c.system(api)
		if err == nil {
			v := ""
			if api.Service != nil {
				v = api.Service.Vendor
			}
			if v == "" && sys != nil {
				v = sys.Manufacturer
			}
			c.mu.Lock()
			c.vendor = v
			c.mu.Unlock()
		}
		return err
	}); err != nil {
		c.Close(ctx)
		return nil, err
	}
	return c, nil
}

// Vendor is what the BMC says it is: its service root's Vendor, or its
// system's Manufacturer when the root has none (as the BMC wrote it: fold
// it before using it as a label).
func (c *Client) Vendor() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vendor
}

// endpointPolicy checks that ep's TLS settings make sense together.
func endpointPolicy(ep Endpoint, u *url.URL) (*tlsPolicy, error) {
	pol := &tlsPolicy{url: ep.URL, host: u.Hostname(), roots: ep.RootCAs, insecure: ep.Insecure}
	if ep.Fingerprint != "" {
		if ep.Insecure {
			return nil, fmt.Errorf("redfish %s: both a certificate fingerprint and insecure: a pinned BMC is verified, give one", ep.URL)
		}
		if ep.RootCAs != nil {
			return nil, fmt.Errorf("redfish %s: both a certificate fingerprint and a CA bundle: give one", ep.URL)
		}
		sum, err := ParseFingerprint(ep.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("redfish %s: %w", ep.URL, err)
		}
		pol.pin = sum[:]
	}
	if u.Scheme == "http" && !ep.Insecure {
		return nil, fmt.Errorf("redfish %s: plain http:// would send the BMC password and every command in clear: "+
			"use https://, or set insecure: true under the node's bmc in the inventory to allow it", ep.URL)
	}
	return pol, nil
}

// newHTTPClient bounds every phase of a request: gofish's default client
// has no timeout at all.
func newHTTPClient(tlsCfg *tls.Config, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		// BMCs live on the management network: never via a proxy.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
		TLSClientConfig:       tlsCfg,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// login opens a session (or falls back to Basic auth) and installs the new
// gofish client.
func (c *Client) login(ctx context.Context) error {
	c.mu.Lock()
	basic := c.basic
	c.mu.Unlock()
	api, err := c.connect(ctx, basic)
	if err != nil && !basic && sessionsUnsupported(err) {
		c.log.Warn("BMC offers no Redfish sessions; using Basic auth", "err", err)
		basic = true
		api, err = c.connect(ctx, true)
	}
	if err != nil {
		var ce *CertificateError
		if errors.As(err, &ce) {
			// Nothing was sent: the handshake stopped before any request.
			return fmt.Errorf("redfish: %w", ce)
		}
		if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
			return c.loginError(st)
		}
		return brief(fmt.Errorf("redfish %s: login: %w", c.ep.URL, err))
	}
	c.mu.Lock()
	c.api, c.basic = api, basic
	c.mu.Unlock()
	if !basic {
		c.log.Debug("session opened")
	}
	return nil
}

func (c *Client) connect(ctx context.Context, basic bool) (*gofish.APIClient, error) {
	cctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	return gofish.ConnectContext(cctx, gofish.ClientConfig{
		Endpoint:          c.ep.URL,
		Username:          c.ep.Username,
		Password:          c.ep.Password,
		HTTPClient:        c.httpc,
		NoModifyTransport: true, // our transport already has TLS and timeouts
		ReuseConnections:  true,
		BasicAuth:         basic,
	})
}

// loginError is a refused login: one line, and no Redfish body (it says
// nothing more than the status, and a kilobyte of JSON buries the point).
func (c *Client) loginError(status int) error {
	return &LoginError{URL: c.ep.URL, Username: c.ep.Username, Status: status, PasswordFrom: c.ep.PasswordFrom}
}

// sessionsUnsupported tells "no SessionService here" from a refused login.
func sessionsUnsupported(err error) bool {
	switch statusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	// gofish's words when the service root has no Links.Sessions.
	return strings.Contains(err.Error(), "no target provided")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func statusOf(err error) int {
	var e *schemas.Error
	if errors.As(err, &e) {
		return e.HTTPReturnedStatusCode
	}
	return 0
}

// call runs fn with a gofish client bound to a per-call deadline. A 401 on
// a session (the BMC reset and forgot it) triggers one re-login and retry.
func (c *Client) call(ctx context.Context, what string, fn func(api *gofish.APIClient) error) error {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		api, basic, closed := c.api, c.basic, c.closed
		c.mu.Unlock()
		if closed {
			return fmt.Errorf("redfish %s: %s: client is closed", c.ep.URL, what)
		}
		cctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		err := fn(api.WithContext(cctx))
		timedOut := ctx.Err() == nil && (cctx.Err() != nil || isTimeout(err))
		cancel()
		if err == nil {
			return nil
		}
		if attempt == 0 && !basic && statusOf(err) == http.StatusUnauthorized {
			c.log.Warn("session rejected; logging in again", "call", what)
			if lerr := c.relogin(ctx, api); lerr != nil {
				return fmt.Errorf("redfish %s: %s: session expired and re-login failed: %w", c.ep.URL, what, lerr)
			}
			continue
		}
		if st := statusOf(err); basic && (st == http.StatusUnauthorized || st == http.StatusForbidden) {
			// Under Basic auth every request is a login.
			return c.loginError(st)
		}
		if timedOut {
			return brief(fmt.Errorf("redfish %s: %s: no answer within %v: %w", c.ep.URL, what, c.o.Timeout, err))
		}
		return brief(fmt.Errorf("redfish %s: %s: %w", c.ep.URL, what, err))
	}
}

// relogin replaces a dead session, unless another call already did.
func (c *Client) relogin(ctx context.Context, dead *gofish.APIClient) error {
	c.mu.Lock()
	replaced := c.api != dead
	c.mu.Unlock()
	if replaced {
		return nil
	}
	return c.login(ctx)
}

// CloseIdleConnections closes the kept-alive connections to the BMC and
// keeps the session: a pool calls it between pipeline steps, which are
// minutes apart on a real node, so that no connection (two goroutines,
// buffers and TLS state on each side) sits idle meanwhile.
func (c *Client) CloseIdleConnections() { c.httpc.CloseIdleConnections() }

// Close logs the session out: BMCs allow only a few sessions and keep them
// for many minutes. Safe to call twice.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	api, basic := c.api, c.basic
	c.mu.Unlock()
	if api == nil {
		return nil
	}
	defer c.httpc.CloseIdleConnections()
	if basic {
		return nil
	}
	s, err := api.GetSession()
	if err != nil || s.ID == "" {
		return nil // never had a session
	}
	cctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	err = api.WithContext(cctx).Service.DeleteSession(s.ID)
	switch st := statusOf(err); {
	case err == nil:
		c.log.Debug("session closed", "session", s.ID)
		return nil
	case st == http.StatusUnauthorized || st == http.StatusNotFound:
		return nil // the BMC already dropped it
	default:
		return fmt.Errorf("redfish %s: logout of session %s: %w", c.ep.URL, s.ID, err)
	}
}

// system fetches the first ComputerSystem, remembering where it is.
func (c *Client) system(api *gofish.APIClient) (*schemas.ComputerSystem, error) {
	c.mu.Lock()
	uri := c.sysURI
	c.mu.Unlock()
	if uri != "" {
		return schemas.GetComputerSystem(api, uri)
	}
	systems, err := api.Service.Systems()
	if err != nil {
		return nil, fmt.Errorf("list Systems: %w", err)
	}
	if len(systems) == 0 {
		return nil, errors.New("the BMC lists no ComputerSystem under /redfish/v1/Systems")
	}
	if len(systems) > 1 {
		c.log.Warn("BMC lists several systems; driving the first", "count", len(systems), "system", systems[0].ODataID)
	}
	uri, err = bmcPath(systems[0].ODataID)
	if err != nil {
		return nil, fmt.Errorf("first ComputerSystem: %w", err)
	}
	c.mu.Lock()
	c.sysURI = uri
	c.mu.Unlock()
	return systems[0], nil
}

// System describes the first ComputerSystem.
func (c *Client) System(ctx context.Context) (*SystemInfo, error) {
	var info *SystemInfo
	err := c.call(ctx, "read system", func(api *gofish.APIClient) error {
		sys, err := c.system(api)
		if err != nil {
			return err
		}
		st, err := parseBootState(sys.RawData)
		if err != nil {
			return fmt.Errorf("system %s: %w", sys.ODataID, err)
		}
		resets, err := sys.GetSupportedResetTypes()
		if err != nil {
			return fmt.Errorf("system %s: reset types: %w", sys.ODataID, err)
		}
		info = &SystemInfo{
			ID: sys.ID, URI: sys.ODataID, Serial: sys.SerialNumber, UUID: sys.UUID,
			Manufacturer: sys.Manufacturer, Model: sys.Model, PowerState: string(sys.PowerState), ETag: sys.ODataEtag,
			BootSourceOverrideTarget: BootTarget(st.Target), BootSourceOverrideEnabled: st.Enabled, BootSourceOverrideMode: st.Mode,
			AllowedBootTargets: st.AllowedTargets, AllowedBootEnabled: st.AllowedEnabled, AllowedBootModes: st.AllowedModes,
		}
		for _, r := range resets {
			info.AllowedResetTypes = append(info.AllowedResetTypes, string(r))
		}
		// MACs are a nice-to-have: an inventory that fails must not fail System.
		if nics, err := sys.EthernetInterfaces(); err == nil {
			for _, n := range nics {
				if mac := strings.ToLower(n.MACAddress); mac != "" && !slices.Contains(info.MACs, mac) {
					info.MACs = append(info.MACs, mac)
				}
			}
		} else {
			c.log.Debug("EthernetInterfaces unreadable", "err", err)
		}
		return nil
	})
	return info, err
}

// PowerState is the system's PowerState ("On", "Off", or transitional
// values such as "PoweringOn" on some BMCs).
func (c *Client) PowerState(ctx context.Context) (string, error) {
	var ps string
	err := c.call(ctx, "read power state", func(api *gofish.APIClient) error {
		sys, err := c.readSystem(api)
		if err != nil {
			return err
		}
		ps = sys.PowerState
		return nil
	})
	return ps, err
}

// PowerOn powers the system on; no-op if it is already on.
func (c *Client) PowerOn(ctx context.Context) error {
	return c.reset(ctx, "On", func(ps string) bool { return ps == "On" })
}

// PowerOff powers the system off (force: cut power; otherwise ask the OS).
// No-op if already off. It returns once the BMC accepted the request; use
// WaitPowerState to wait for the result.
func (c *Client) PowerOff(ctx context.Context, force bool) error {
	rt := "GracefulShutdown"
	if force {
		rt = "ForceOff"
	}
	return c.reset(ctx, rt, func(ps string) bool { return ps == "Off" })
}

// Reset performs resetType (ForceRestart, GracefulRestart, PowerCycle, ...),
// substituting the closest allowable value when the BMC lacks it. A restart
// of a system that is off powers it on.
func (c *Client) Reset(ctx context.Context, resetType string) error {
	return c.reset(ctx, resetType, nil)
}

func (c *Client) reset(ctx context.Context, resetType string, done func(powerState string) bool) error {
	return c.call(ctx, "reset "+resetType, func(api *gofish.APIClient) error {
		sys, err := c.readSystem(api)
		if err != nil {
			return err
		}
		ps := sys.PowerState
		if done != nil && done(ps) {
			c.log.Debug("reset skipped: already in the target state", "reset", resetType, "power", ps)
			return nil
		}
		want := resetType
		if isRestart(resetType) && ps == "Off" {
			want = "On" // many BMCs refuse to restart a host that is off
		}
		names, err := c.resetTypes(api, sys)
		if err != nil {
			return fmt.Errorf("system %s: reset types: %w", sys.ODataID, err)
		}
		rt, err := chooseReset(want, normalizeAllowed(names, resetTypes))
		if err != nil {
			return err
		}
		if rt != resetType {
			c.log.Info("reset type substituted", "asked", resetType, "using", rt, "power", ps)
		}
		// Posted directly rather than through gofish's Reset, which checks
		// rt against the allowable values as the BMC wrote them and so
		// refuses what normalizeAllowed recovered from a run-together list.
		target, err := sys.resetTarget()
		if err != nil {
			return fmt.Errorf("system %s: %w", sys.ODataID, err)
		}
		resp, err := api.Post(target, map[string]any{"ResetType": rt})
		if resp != nil {
			resp.Body.Close()
		}
		if err != nil {
			return fmt.Errorf("POST %s ResetType=%s: %w", target, rt, err)
		}
		c.log.Info("reset", "type", rt, "system", sys.ODataID)
		return nil
	})
}

// WaitPowerState polls until the system reports want (e.g. after a
// graceful PowerOff) or ctx ends.
func (c *Client) WaitPowerState(ctx context.Context, want string, poll time.Duration) error {
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for {
		ps, err := c.PowerState(ctx)
		if err == nil && ps == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redfish %s: waiting for PowerState %s (last %q, err %v): %w", c.ep.URL, want, ps, err, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// BootOverride reads BootSourceOverrideTarget and BootSourceOverrideEnabled.
func (c *Client) BootOverride(ctx context.Context) (BootTarget, string, error) {
	st, err := c.bootState(ctx)
	return BootTarget(st.Target), st.Enabled, err
}

// BootMode reads BootSourceOverrideMode ("" where the system has none).
func (c *Client) BootMode(ctx context.Context) (string, error) {
	st, err := c.bootState(ctx)
	return st.Mode, err
}

func (c *Client) bootState(ctx context.Context) (bootState, error) {
	var st bootState
	err := c.call(ctx, "read boot override", func(api *gofish.APIClient) error {
		sys, err := c.readSystem(api)
		if err != nil {
			return err
		}
		st, err = sys.bootState()
		return err
	})
	return st, err
}

// SetBootOverride makes the system boot target on the next boot (once) or
// on every boot. It adapts to the BMC's shape: the boot mode by
// Options.BootMode (UEFI for network boots where the BMC offers it), Mode
// only where the system has one (and dropped if the BMC refuses it),
// If-Match with the ETag, Lenovo-style BMCs without Continuous, Pxe where
// UefiHttp is asked and not offered. It reads the result back.
func (c *Client) SetBootOverride(ctx context.Context, target BootTarget, once bool) error {
	var planned bootPatch
	want := bootWant{Target: target, Once: once, Mode: c.o.BootMode, HTTPBootURI: c.o.HTTPBootURI}
	err := c.call(ctx, fmt.Sprintf("set boot override %s once=%v", target, once), func(api *gofish.APIClient) error {
		var lastErr error
		// Two rounds: the second after a 412 (the resource changed between
		// our read and our write, e.g. a Once was consumed by a boot).
		for round := 0; round < 2; round++ {
			sys, err := c.readSystem(api)
			if err != nil {
				return err
			}
			st, err := sys.bootState()
			if err != nil {
				return fmt.Errorf("system %s: %w", sys.ODataID, err)
			}
			p, err := planBootOverride(st, want)
			if err != nil {
				return fmt.Errorf("system %s: %w", sys.ODataID, err)
			}
			planned = p
			if p.Note != "" {
				c.log.Warn("boot override adapted to the BMC", "note", p.Note)
			}
			if p.empty() {
				c.log.Debug("boot override already set", "target", st.Target, "enabled", st.Enabled, "mode", st.Mode)
				return nil
			}
			lastErr = c.patchBoot(api, sys, p)
			if statusOf(lastErr) == http.StatusBadRequest && (p.Mode != "" || p.HTTPBootURI != "") {
				c.log.Warn("BMC refused BootSourceOverrideMode or HttpBootUri; retrying without them", "err", lastErr)
				p.Mode, p.HTTPBootURI = "", ""
				planned = p
				lastErr = c.patchBoot(api, sys, p)
			}
			if statusOf(lastErr) != http.StatusPreconditionFailed {
				break
			}
			c.log.Info("ETag changed under us; re-reading the system", "err", lastErr)
		}
		return lastErr
	})
	if err != nil || planned.empty() {
		return err
	}
	// Verify: what we asked for is what the BMC now says.
	got, err := c.bootState(ctx)
	if err != nil {
		return fmt.Errorf("redfish %s: verify boot override: %w", c.ep.URL, err)
	}
	if (planned.Target != "" && got.Target != planned.Target) || got.Enabled != planned.Enabled {
		return fmt.Errorf("redfish %s: boot override not applied: asked Target=%q Enabled=%q, BMC reports Target=%q Enabled=%q",
			c.ep.URL, planned.Target, planned.Enabled, got.Target, got.Enabled)
	}
	if planned.Mode != "" && got.Mode != planned.Mode {
		// Some BMCs apply the mode only at the next POST, or not at all:
		// the boot still happens, possibly in the other mode (the proxy DHCP
		// serves both).
		c.log.Warn("BMC does not report the boot mode asked for", "asked", planned.Mode, "reports", got.Mode)
	}
	c.log.Info("boot override set", "target", got.Target, "enabled", got.Enabled, "mode", got.Mode)
	return nil
}

func (c *Client) patchBoot(api *gofish.APIClient, sys *systemDoc, p bootPatch) error {
	headers := map[string]string{}
	if sys.ETag != "" {
		headers["If-Match"] = sys.ETag
	}
	resp, err := api.PatchWithHeaders(sys.ODataID, map[string]any{"Boot": p}, headers)
	if err != nil {
		return fmt.Errorf("PATCH %s Boot %+v: %w", sys.ODataID, p, err)
	}
	return schemas.CleanupHTTPResponse(resp)
}

// FirmwareInventory lists UpdateService.FirmwareInventory.
//
// Each member is read with one GET and decoded once, straight into what
// CURE uses: gofish decoded every member into its full schema struct and
// kept the raw body, which was then decoded again for the links and the
// Oem field, and it read the UpdateService on every call. The inventory's
// URI is kept from the first read. A coordinator reads every node's
// inventory several times per run, so this was most of its JSON decoding.
func (c *Client) FirmwareInventory(ctx context.Context) ([]FirmwareItem, error) {
	var items []FirmwareItem
	err := c.call(ctx, "read firmware inventory", func(api *gofish.APIClient) error {
		c.mu.Lock()
		uri := c.invURI
		c.mu.Unlock()
		if uri == "" {
			us, err := api.Service.UpdateService()
			if err != nil {
				return fmt.Errorf("UpdateService: %w", err)
			}
			if us == nil || us.ODataID == "" {
				return fmt.Errorf("%w: the service root links no UpdateService", ErrNotSupported)
			}
			caps, _, err := parseUpdateService(us.RawData)
			if err != nil {
				return fmt.Errorf("UpdateService %s: %w", us.ODataID, err)
			}
			if caps.InventoryURI == "" {
				return fmt.Errorf("%w: UpdateService %s links no FirmwareInventory", ErrNotSupported, us.ODataID)
			}
			uri = caps.InventoryURI
			c.mu.Lock()
			c.invURI = uri
			c.mu.Unlock()
		}
		// Members in pages (Members@odata.nextLink), read one after the
		// other: gofish's client sends one request at a time per BMC
		// anyway, over one kept-alive connection. Where the service root
		// advertises $expand, the members come in the collection's own
		// answer (one request instead of one per member: at fleet scale
		// the inventory reads were the coordinator's largest Redfish
		// cost); a member still given as a link is read on its own.
		expand := expandQuery(api.Service.ProtocolFeaturesSupported.ExpandQuery)
		var members []string
		items = nil
		for page, next := 0, uri+expand; next != ""; page++ {
			got, links, nextLink, err := getInventoryPage(api, next)
			if err != nil {
				return fmt.Errorf("FirmwareInventory %s: %w", uri, err)
			}
			items, members = append(items, got...), append(members, links...)
			if len(items)+len(members) > maxInventoryMembers || page >= maxInventoryPages {
				return fmt.Errorf("FirmwareInventory %s: more than %d members or %d pages", uri, maxInventoryMembers, maxInventoryPages)
			}
			next = nextLink
		}
		var errs []error
		for _, p := range members {
			var doc inventoryDoc
			if _, err := getJSON(api, p, &doc); err != nil {
				errs = append(errs, fmt.Errorf("FirmwareInventory: %w", err))
				if isTimeout(err) {
					break // the call's deadline passed: the rest would fail the same way
				}
				continue
			}
			items = append(items, doc.item())
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		slices.SortFunc(items, func(a, b FirmwareItem) int { return strings.Compare(a.ID, b.ID) })
		return nil
	})
	return items, err
}

// getInventoryPage reads one page of the inventory as it streams in
// (decodeInventoryPage), its body bounded by the transport.
func getInventoryPage(api *gofish.APIClient, uri string) (items []FirmwareItem, links []string, next string, err error) {
	resp, err := api.Get(uri)
	if err != nil {
		return nil, nil, "", fmt.Errorf("GET %s: %w", uri, err)
	}
	defer resp.Body.Close()
	items, links, next, err = decodeInventoryPage(resp.Body)
	if err != nil {
		var big *BodyTooLargeError
		if errors.As(err, &big) {
			return nil, nil, "", big
		}
		return nil, nil, "", fmt.Errorf("page %s: %w", uri, err)
	}
	return items, links, next, nil
}

// inventoryDoc is a SoftwareInventory member, read on its own or expanded
// in its collection: what CURE uses of it, decoded once.
type inventoryDoc struct {
	ODataID    string `json:"@odata.id"`
	ID         string `json:"Id"`
	Name       string
	Version    string
	SoftwareID string `json:"SoftwareId"`
	Updateable bool
	Oem        struct {
		CURE struct{ PendingVersion string }
	}
	RelatedItem []struct {
		ID string `json:"@odata.id"`
	}
}

func (d *inventoryDoc) item() FirmwareItem {
	it := FirmwareItem{ID: d.ID, Name: d.Name, Version: d.Version, SoftwareID: d.SoftwareID, Updateable: d.Updateable,
		PendingVersion: d.Oem.CURE.PendingVersion}
	for _, r := range d.RelatedItem {
		if r.ID != "" && len(it.RelatedItems) < 16 {
			it.RelatedItems = append(it.RelatedItems, r.ID)
		}
	}
	return it
}

const (
	// maxInventoryMembers and maxInventoryPages bound what one BMC's
	// inventory may list.
	maxInventoryMembers = 1024
	maxInventoryPages   = 64
)
