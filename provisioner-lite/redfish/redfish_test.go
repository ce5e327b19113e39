package redfish

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var quietLog = log.New(io.Discard, "", 0)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recorder keeps the PATCH requests a test server received.
type recorder struct {
	mu      sync.Mutex
	patches []recorded
}

type recorded struct {
	ifMatch string
	body    string
}

func (r *recorder) Patches() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.patches)
}

// bmcServer runs a virtual BMC over a fake machine, behind optional
// middleware that plays a vendor quirk.
func bmcServer(t *testing.T, cfg vbmc.Config, wrap func(http.Handler) http.Handler) (*vbmc.BMC, *vbmc.FakeMachine, *recorder, string) {
	t.Helper()
	m := vbmc.NewFakeMachine()
	cfg.Logger = testLogger(t).With("side", "bmc")
	if cfg.Name == "" {
		cfg.Name = "node1"
	}
	b, err := vbmc.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var h http.Handler = b.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec.mu.Lock()
			rec.patches = append(rec.patches, recorded{ifMatch: r.Header.Get("If-Match"), body: string(body)})
			rec.mu.Unlock()
		}
		inner.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = quietLog // refused handshakes are what some tests want
	srv.StartTLS()
	testCerts.Store(srv.URL, srv.Certificate())
	t.Cleanup(func() {
		b.Close(context.Background())
		srv.CloseClientConnections()
		srv.Close()
	})
	return b, m, rec, srv.URL
}

// testCerts maps a test BMC's URL to the certificate it serves.
var testCerts sync.Map

// endpoint is the test BMC at url with its TLS identity: its CA-verified
// certificate (httptest) or its pinned fingerprint (vbmc.Listen).
func endpoint(t *testing.T, url, password string) Endpoint {
	t.Helper()
	ep := Endpoint{URL: url, Username: "admin", Password: password}
	switch v, _ := testCerts.Load(url); cert := v.(type) {
	case *x509.Certificate:
		ep.RootCAs = x509.NewCertPool()
		ep.RootCAs.AddCert(cert)
	case string:
		ep.Fingerprint = cert
	default:
		t.Fatalf("no TLS identity recorded for test BMC %s", url)
	}
	return ep
}

func connect(t *testing.T, url string, timeout time.Duration) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, endpoint(t, url, "password"),
		Options{Timeout: timeout, Logger: testLogger(t).With("side", "driver")})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestPowerOnOff(t *testing.T) {
	b, m, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if ps, err := c.PowerState(ctx); err != nil || ps != "Off" {
		t.Fatalf("PowerState = %q, %v; want Off", ps, err)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.PowerOn(ctx); err != nil { // already on: no second boot
		t.Fatal(err)
	}
	if b.PowerState() != "On" || len(m.Boots()) != 1 {
		t.Fatalf("after two PowerOn: BMC power %s, boots %v; want On and one boot", b.PowerState(), m.Boots())
	}
	if err := c.PowerOff(ctx, true); err != nil {
		t.Fatal(err)
	}
	if ps, _ := c.PowerState(ctx); ps != "Off" || !slices.Equal(m.Stops(), []bool{true}) {
		t.Fatalf("after PowerOff(force): %s, stops %v", ps, m.Stops())
	}
	if err := c.PowerOff(ctx, true); err != nil { // already off: no-op
		t.Fatal(err)
	}
	if len(m.Stops()) != 1 {
		t.Fatalf("PowerOff of an off system touched the machine: %v", m.Stops())
	}
}

func TestGracefulPowerOffAndWait(t *testing.T) {
	b, m, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.PowerOff(ctx, false); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitPowerState(wctx, "Off", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Stops(), []bool{false}) || b.PowerState() != "Off" {
		t.Fatalf("graceful off: stops %v power %s", m.Stops(), b.PowerState())
	}
}

func TestOnceVersusContinuous(t *testing.T) {
	b, m, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if err := c.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if tg, en := b.BootOverride(); tg != "Pxe" || en != "Once" {
		t.Fatalf("BMC override = %s/%s, want Pxe/Once", tg, en)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	tg, en, err := c.BootOverride(ctx)
	if err != nil || tg != BootPxe || en != "Disabled" {
		t.Fatalf("after the boot: %s/%s %v, want Pxe/Disabled (Once consumed)", tg, en, err)
	}
	if err := c.SetBootOverride(ctx, BootHdd, false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Reset(ctx, "ForceRestart"); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Boots(); !slices.Equal(got, []vbmc.BootDevice{vbmc.BootPxe, vbmc.BootHdd, vbmc.BootHdd}) {
		t.Fatalf("boots = %v, want Pxe (once) then Hdd twice (continuous)", got)
	}
	if _, en := b.BootOverride(); en != "Continuous" {
		t.Fatalf("Continuous did not persist: %s", en)
	}
	n := len(b.Overrides())
	if err := c.SetBootOverride(ctx, BootHdd, false); err != nil {
		t.Fatal(err)
	}
	if len(b.Overrides()) != n {
		t.Fatal("setting the override it already has sent a PATCH")
	}
}

func TestIfMatchAndMode(t *testing.T) {
	b, _, rec, url := bmcServer(t, vbmc.Config{RequireIfMatch: true}, nil)
	c := connect(t, url, 5*time.Second)
	etag := b.ETag()
	if err := c.SetBootOverride(context.Background(), BootPxe, true); err != nil {
		t.Fatal(err)
	}
	p := rec.Patches()
	if len(p) != 1 || p[0].ifMatch != etag {
		t.Fatalf("PATCHes = %+v, want one with If-Match %s", p, etag)
	}
	if !strings.Contains(p[0].body, `"BootSourceOverrideMode":"Legacy"`) {
		t.Fatalf("PATCH body %s lacks the system's current mode", p[0].body)
	}
}

// A BMC that offers UEFI gets the PXE override in UEFI mode and boots its
// machine so; the disk override afterwards keeps UEFI. --boot-mode legacy
// keeps it in Legacy.
func TestUEFIModeWhereOffered(t *testing.T) {
	b, m, rec, url := bmcServer(t, vbmc.Config{BootModes: []string{"Legacy", "UEFI"}}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if err := c.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if p := rec.Patches(); len(p) != 1 || !strings.Contains(p[0].body, `"BootSourceOverrideMode":"UEFI"`) {
		t.Fatalf("PATCHes = %+v, want one setting UEFI", p)
	}
	if mode, err := c.BootMode(ctx); err != nil || mode != "UEFI" {
		t.Fatalf("BootMode = %q, %v", mode, err)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(ctx, BootHdd, false); err != nil {
		t.Fatal(err)
	}
	if got := b.Overrides(); len(got) != 2 || got[1].Mode != "UEFI" || got[1].Target != "Hdd" {
		t.Errorf("overrides = %+v, want Hdd kept in UEFI", got)
	}
	if got := m.Modes(); len(got) != 1 || got[0] != "UEFI" {
		t.Errorf("machine booted in %v, want [UEFI]", got)
	}

	b2, _, rec2, url2 := bmcServer(t, vbmc.Config{Name: "node2", BootModes: []string{"Legacy", "UEFI"}}, nil)
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	legacy, err := Connect(ctx2, endpoint(t, url2, "password"), Options{Timeout: 5 * time.Second, BootMode: BootModeLegacy, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := legacy.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if p := rec2.Patches(); len(p) != 1 || !strings.Contains(p[0].body, `"BootSourceOverrideMode":"Legacy"`) || b2.BootMode() != "Legacy" {
		t.Errorf("legacy policy: PATCHes %+v, mode %s", p, b2.BootMode())
	}
	// UefiHttp asked of a BMC that does not offer it: PXE, said so.
	if err := c.SetBootOverride(ctx, BootUefiHttp, true); err != nil {
		t.Fatal(err)
	}
	if tg, en := b.BootOverride(); tg != "Pxe" || en != "Once" {
		t.Errorf("UefiHttp fallback: override %s/%s, want Pxe/Once", tg, en)
	}
}

func TestETagRaceRetried(t *testing.T) {
	var once sync.Once
	// The first PATCH finds the resource changed underneath (412).
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPatch {
				fail := false
				once.Do(func() { fail = true })
				if fail {
					r.Header.Set("If-Match", `"someone-else"`)
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	b, _, rec, url := bmcServer(t, vbmc.Config{}, wrap)
	c := connect(t, url, 5*time.Second)
	if err := c.SetBootOverride(context.Background(), BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if len(rec.Patches()) != 2 {
		t.Fatalf("PATCHes = %d, want a 412 then a retry", len(rec.Patches()))
	}
	if tg, en := b.BootOverride(); tg != "Pxe" || en != "Once" {
		t.Fatalf("override = %s/%s", tg, en)
	}
}

func TestNoModeVariant(t *testing.T) {
	b, _, rec, url := bmcServer(t, vbmc.Config{NoBootMode: true}, nil)
	c := connect(t, url, 5*time.Second)
	if err := c.SetBootOverride(context.Background(), BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if p := rec.Patches(); len(p) != 1 || strings.Contains(p[0].body, "BootSourceOverrideMode") {
		t.Fatalf("PATCHes = %+v, want one without BootSourceOverrideMode", p)
	}
	if tg, en := b.BootOverride(); tg != "Pxe" || en != "Once" {
		t.Fatalf("override = %s/%s", tg, en)
	}
}

func TestModeRefusedRetriedWithout(t *testing.T) {
	// A BMC that shows Mode but answers 400 when a PATCH carries it.
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPatch {
				body, _ := io.ReadAll(r.Body)
				if bytes.Contains(body, []byte("BootSourceOverrideMode")) {
					w.WriteHeader(http.StatusBadRequest)
					io.WriteString(w, `{"error":{"code":"Base.1.5.0.PropertyNotWritable","message":"BootSourceOverrideMode is read only"}}`)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			h.ServeHTTP(w, r)
		})
	}
	b, _, rec, url := bmcServer(t, vbmc.Config{}, wrap)
	c := connect(t, url, 5*time.Second)
	if err := c.SetBootOverride(context.Background(), BootPxe, true); err != nil {
		t.Fatal(err)
	}
	if p := rec.Patches(); len(p) != 2 || strings.Contains(p[1].body, "BootSourceOverrideMode") {
		t.Fatalf("PATCHes = %+v, want a refused one with Mode then one without", p)
	}
	if tg, en := b.BootOverride(); tg != "Pxe" || en != "Once" {
		t.Fatalf("override = %s/%s", tg, en)
	}
}

func TestLenovoStyleNoContinuous(t *testing.T) {
	b, m, _, url := bmcServer(t, vbmc.Config{NoContinuous: true}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	if err := c.SetBootOverride(ctx, BootPxe, false); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "Once") {
		t.Fatalf("persistent Pxe on a BMC without Continuous: %v, want ErrNotSupported naming the allowable values", err)
	}
	if err := c.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	// Persistent disk boot: the override is disabled, the disk-first order rules.
	if err := c.SetBootOverride(ctx, BootHdd, false); err != nil {
		t.Fatal(err)
	}
	if _, en := b.BootOverride(); en != "Disabled" {
		t.Fatalf("Enabled = %s, want Disabled", en)
	}
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.Boots(); !slices.Equal(got, []vbmc.BootDevice{vbmc.BootHdd}) {
		t.Fatalf("boots = %v, want Hdd", got)
	}
}

func TestReloginAfterSessionLoss(t *testing.T) {
	b, _, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	b.ExpireSessions() // the BMC reset and forgot every session
	if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
		t.Fatalf("PowerState after session loss = %q, %v", ps, err)
	}
	if n := b.SessionCount(); n != 1 {
		t.Fatalf("sessions = %d, want the one new session", n)
	}
	// If logging in again is refused too, the error says so.
	b.ExpireSessions()
	b.SetFailAuth(true)
	_, err := c.PowerState(context.Background())
	if err == nil || !strings.Contains(err.Error(), "re-login failed") {
		t.Fatalf("want a re-login failure, got %v", err)
	}
}

func TestCloseLogsOut(t *testing.T) {
	b, _, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	if b.SessionCount() != 1 {
		t.Fatalf("sessions after Connect = %d", b.SessionCount())
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.SessionCount() != 0 {
		t.Fatalf("sessions after Close = %d, want 0", b.SessionCount())
	}
	if _, err := c.PowerState(context.Background()); err == nil {
		t.Fatal("call on a closed client succeeded")
	}
}

func TestBadCredentials(t *testing.T) {
	_, _, _, url := bmcServer(t, vbmc.Config{}, nil)
	ep := endpoint(t, url, "nope")
	ep.PasswordFrom = "read from the coordinator's environment variable BMC_PW (passwordEnv)"
	_, err := Connect(context.Background(), ep, Options{Timeout: 5 * time.Second, Logger: testLogger(t)})
	// One line an operator can act on: which BMC, which user, where the
	// password came from; not the BMC's JSON answer.
	want := `BMC ` + url + ` refused the login of user "admin" (HTTP 401): the password was read from the coordinator's environment variable BMC_PW (passwordEnv)`
	if !errors.Is(err, ErrLoginRefused) || err.Error() != want {
		t.Fatalf("wrong password: %v\nwant %s", err, want)
	}
	if _, err := Connect(context.Background(), Endpoint{URL: "bmc1:443", Username: "a"}, Options{}); err == nil || !strings.Contains(err.Error(), "endpoint URL") {
		t.Fatalf("bad URL: %v", err)
	}
}

func TestBasicAuthFallback(t *testing.T) {
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/redfish/v1/SessionService") {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	b, _, _, url := bmcServer(t, vbmc.Config{}, wrap)
	c := connect(t, url, 5*time.Second)
	if err := c.PowerOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.SessionCount() != 0 || b.PowerState() != "On" {
		t.Fatalf("basic auth: sessions %d power %s", b.SessionCount(), b.PowerState())
	}
	// Basic auth with a wrong password fails at Connect, not later.
	_, err := Connect(context.Background(), endpoint(t, url, "nope"), Options{Timeout: 5 * time.Second})
	if err == nil {
		t.Fatal("basic auth with a wrong password connected")
	}
}

func TestHungBMCTimesOut(t *testing.T) {
	b, _, _, url := bmcServer(t, vbmc.Config{}, nil)
	// 1s: the call after the hang opens a new TLS connection, whose
	// handshake must fit the same per-call budget on a loaded CI machine.
	c := connect(t, url, time.Second)
	b.HangNextRequest()
	start := time.Now()
	_, err := c.PowerState(context.Background())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hung BMC: err %v after %v; want an error within the 1s timeout", err, time.Since(start))
	}
	if !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("error does not say it timed out: %v", err)
	}
	if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
		t.Fatalf("call after the hang: %q %v", ps, err)
	}
}

func TestConnectToSilentServerTimesOut(t *testing.T) {
	// Accepts TCP connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	start := time.Now()
	_, err = Connect(context.Background(), Endpoint{URL: "https://" + ln.Addr().String(), Username: "admin", Password: "x"},
		Options{Timeout: 300 * time.Millisecond})
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("silent server: err %v after %v", err, time.Since(start))
	}
}

func TestResetFallbackAndPowerOnFromOff(t *testing.T) {
	b, m, _, url := bmcServer(t, vbmc.Config{}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	// Off: a restart powers the system on.
	if err := c.Reset(ctx, "ForceRestart"); err != nil {
		t.Fatal(err)
	}
	// The mockup has no PowerCycle: ForceRestart stands in.
	if err := c.Reset(ctx, "PowerCycle"); err != nil {
		t.Fatal(err)
	}
	h := b.History()
	if len(h) != 2 || h[0].Reason != "On" || h[1].Reason != "ForceRestart" {
		t.Fatalf("history = %+v, want On then ForceRestart", h)
	}
	if len(m.Boots()) != 2 {
		t.Fatalf("boots = %v", m.Boots())
	}
	if err := c.Reset(ctx, "Nmi"); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Nmi (not offered): %v, want ErrNotSupported", err)
	}
}

func TestSystemAndFirmware(t *testing.T) {
	_, _, _, url := bmcServer(t, vbmc.Config{Serial: "SN-42", MAC: "52:54:00:AA:BB:01", UUID: "8f4a1c2e-0000-4000-8000-000000000042"}, nil)
	c := connect(t, url, 5*time.Second)
	ctx := context.Background()
	s, err := c.System(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Serial != "SN-42" || s.UUID != "8f4a1c2e-0000-4000-8000-000000000042" || s.Manufacturer != "CURE" || s.PowerState != "Off" {
		t.Errorf("system = %+v", s)
	}
	if !slices.Contains(s.MACs, "52:54:00:aa:bb:01") {
		t.Errorf("MACs = %v, want the node's NIC", s.MACs)
	}
	if !slices.Contains(s.AllowedBootEnabled, "Continuous") || !slices.Contains(s.AllowedResetTypes, "ForceRestart") || s.ETag == "" {
		t.Errorf("allowables/etag = %v %v %q", s.AllowedBootEnabled, s.AllowedResetTypes, s.ETag)
	}
	fw, err := c.FirmwareInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(fw, func(f FirmwareItem) bool { return f.ID == "BIOS" })
	if i < 0 || fw[i].Version != "P79 v1.45" || !fw[i].Updateable || fw[i].SoftwareID == "" {
		t.Fatalf("firmware = %+v, want BIOS P79 v1.45", fw)
	}
}

// Where the BMC advertises $expand, the firmware inventory is one request;
// where it does not, or answers the expanded request with links anyway,
// each member is read on its own. The inventory read is the same.
func TestFirmwareInventoryExpanded(t *testing.T) {
	read := func(cfg vbmc.Config, ignoreExpand bool) ([]FirmwareItem, int) {
		t.Helper()
		var gets atomic.Int32
		_, _, _, url := bmcServer(t, cfg, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(r.URL.Path, "/FirmwareInventory") {
					gets.Add(1)
					if ignoreExpand {
						r.URL.RawQuery = ""
					}
				}
				h.ServeHTTP(w, r)
			})
		})
		c := connect(t, url, 5*time.Second)
		fw, err := c.FirmwareInventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return fw, int(gets.Load())
	}
	expanded, n := read(vbmc.Config{}, false)
	if n != 1 || len(expanded) < 2 {
		t.Fatalf("expanded: %d requests for %d members, want 1", n, len(expanded))
	}
	for _, tc := range []struct {
		name         string
		cfg          vbmc.Config
		ignoreExpand bool
	}{
		{"no $expand advertised", vbmc.Config{NoExpand: true}, false},
		{"$expand advertised, links answered", vbmc.Config{}, true},
	} {
		fw, n := read(tc.cfg, tc.ignoreExpand)
		if n != 1+len(fw) {
			t.Errorf("%s: %d requests for %d members, want %d", tc.name, n, len(fw), 1+len(fw))
		}
		if !reflect.DeepEqual(fw, expanded) {
			t.Errorf("%s: inventory\n%+v\nexpanded:\n%+v", tc.name, fw, expanded)
		}
	}
}
