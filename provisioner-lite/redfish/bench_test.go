package redfish

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// The benchmarks time the calls a pipeline makes per node, again and again
// (power state polls, boot override reads and no-op sets, no-op power-ons,
// the inventory, a session), against the virtual BMC over TLS. allocs/op
// counts both sides (the BMC runs in this process): compare variants, not
// absolute figures. The "gofish" variants are the client's former path (the
// full ComputerSystem schema decoded by gofish, its body then decoded again
// for Boot and Actions), kept as the baseline.

func benchClient(b testing.TB) *Client {
	b.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := vbmc.NewFakeMachine()
	bmc, err := vbmc.New(vbmc.Config{Name: "bench", Logger: quiet}, m)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(&replay{next: bmc.Handler(), got: map[string]*httptest.ResponseRecorder{}})
	srv.Config.ErrorLog = quietLog
	srv.StartTLS()
	b.Cleanup(func() {
		bmc.Close(context.Background())
		srv.Close()
	})
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Endpoint{URL: srv.URL, Username: "admin", Password: "password", RootCAs: roots},
		Options{Timeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// replay answers a GET it answered before with the same bytes, so that
// the BMC side of a benchmark costs little and the same for every variant
// (the loops read resources they do not change); anything else goes to
// the virtual BMC, and a change forgets what was kept.
type replay struct {
	next http.Handler
	mu   sync.Mutex
	got  map[string]*httptest.ResponseRecorder
}

func (r *replay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		r.mu.Lock()
		clear(r.got)
		r.mu.Unlock()
		r.next.ServeHTTP(w, req)
		return
	}
	key := req.Header.Get("X-Auth-Token") + " " + req.URL.RequestURI()
	r.mu.Lock()
	rec := r.got[key]
	r.mu.Unlock()
	if rec == nil {
		rec = httptest.NewRecorder()
		r.next.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK {
			r.mu.Lock()
			r.got[key] = rec
			r.mu.Unlock()
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// The hot paths' own decode answers what gofish's full decode answered,
// before and after the state the benchmarks read changes: the baseline the
// benchmarks compare against is the same answer, and the lighter decoder
// loses nothing CURE reads (power state, boot target, enabled, mode).
func TestHotPathsAgreeWithGofish(t *testing.T) {
	c := benchClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(when, wantPower string) {
		t.Helper()
		lite, err := c.PowerState(ctx)
		if err != nil {
			t.Fatalf("%s: PowerState: %v", when, err)
		}
		full, err := gofishPowerState(ctx, c)
		if err != nil {
			t.Fatalf("%s: gofish power state: %v", when, err)
		}
		if lite != full || lite != wantPower {
			t.Errorf("%s: power state %q, gofish %q, want %q", when, lite, full, wantPower)
		}
		liteBoot, err := c.bootState(ctx)
		if err != nil {
			t.Fatalf("%s: bootState: %v", when, err)
		}
		fullBoot, err := gofishBootState(ctx, c)
		if err != nil {
			t.Fatalf("%s: gofish boot state: %v", when, err)
		}
		if !reflect.DeepEqual(liteBoot, fullBoot) {
			t.Errorf("%s: boot state %+v, gofish %+v", when, liteBoot, fullBoot)
		}
	}
	check("fresh", "Off")
	if err := c.SetBootOverride(ctx, BootPxe, true); err != nil {
		t.Fatal(err)
	}
	check("PXE once", "Off")
	if err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	check("powered on", "On")
	if err := c.SetBootOverride(ctx, BootHdd, false); err != nil {
		t.Fatal(err)
	}
	check("disk continuous", "On")
	if target, _, err := c.BootOverride(ctx); err != nil || target != BootHdd {
		t.Errorf("BootOverride = %v, %v, want %v", target, err, BootHdd)
	}
}

// gofishPowerState is PowerState as it was: gofish's full decode.
func gofishPowerState(ctx context.Context, c *Client) (string, error) {
	var ps string
	err := c.call(ctx, "read power state", func(api *gofish.APIClient) error {
		sys, err := schemas.GetComputerSystem(api, c.sysURI)
		if err != nil {
			return err
		}
		ps = string(sys.PowerState)
		return nil
	})
	return ps, err
}

// gofishBootState is bootState as it was: the full decode, then Boot again.
func gofishBootState(ctx context.Context, c *Client) (bootState, error) {
	var st bootState
	err := c.call(ctx, "read boot override", func(api *gofish.APIClient) error {
		sys, err := schemas.GetComputerSystem(api, c.sysURI)
		if err != nil {
			return err
		}
		st, err = parseBootState(sys.RawData)
		return err
	})
	return st, err
}

// gofishPowerOnNoop is a PowerOn of a system already on, as it was: the
// full decode and the power state check.
func gofishPowerOnNoop(ctx context.Context, c *Client) error {
	return c.call(ctx, "reset On", func(api *gofish.APIClient) error {
		sys, err := schemas.GetComputerSystem(api, c.sysURI)
		if err != nil {
			return err
		}
		if sys.PowerState != "On" {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
}

func BenchmarkPowerState(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.Run("gofish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ps, err := gofishPowerState(ctx, c); err != nil || ps != "Off" {
				b.Fatalf("PowerState = %q, %v", ps, err)
			}
		}
	})
	b.Run("lite", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ps, err := c.PowerState(ctx); err != nil || ps != "Off" {
				b.Fatalf("PowerState = %q, %v", ps, err)
			}
		}
	})
	// floor: the same GET, its body read and not decoded: what the
	// round trip costs both sides whatever the decoder.
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.call(ctx, "read power state", func(api *gofish.APIClient) error {
				resp, err := api.Get(c.sysURI)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, err = io.Copy(io.Discard, resp.Body)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBootOverride(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.Run("gofish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := gofishBootState(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lite", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := c.BootOverride(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPowerOnNoop(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	if err := c.PowerOn(ctx); err != nil {
		b.Fatal(err)
	}
	b.Run("gofish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := gofishPowerOnNoop(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lite", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.PowerOn(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSetBootOverrideNoop is a SetBootOverride the system already has:
// one read, no PATCH (the pipeline sets the override before every boot).
func BenchmarkSetBootOverrideNoop(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	if err := c.SetBootOverride(ctx, BootPxe, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.SetBootOverride(ctx, BootPxe, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFirmwareInventory(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if inv, err := c.FirmwareInventory(ctx); err != nil || len(inv) == 0 {
			b.Fatalf("FirmwareInventory = %d items, %v", len(inv), err)
		}
	}
}

// BenchmarkReconnect is one pipeline step on a pooled session: the pool
// closed the idle connection after the last step, so the step's first call
// opens a new one. "full" handshakes every time (no session cache, as
// before), "resumed" resumes the TLS session.
func BenchmarkReconnect(b *testing.B) {
	c := benchClient(b)
	u, _ := url.Parse(c.ep.URL)
	pol, err := endpointPolicy(c.ep, u)
	if err != nil {
		b.Fatal(err)
	}
	cfg := pol.config()
	cfg.ClientSessionCache = nil
	ctx := context.Background()
	full, err := Connect(ctx, c.ep, Options{Timeout: 5 * time.Second, Logger: c.o.Logger, HTTPClient: newHTTPClient(cfg, 5*time.Second)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { full.Close(context.Background()) })
	for _, v := range []struct {
		name string
		c    *Client
	}{{"full", full}, {"resumed", c}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.c.CloseIdleConnections()
				if _, err := v.c.PowerState(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSession is a pooled session's life: login, find the system,
// one power state read, logout.
func BenchmarkSession(b *testing.B) {
	c := benchClient(b)
	ep := c.ep
	quiet := c.o.Logger
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := Connect(ctx, ep, Options{Timeout: 5 * time.Second, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.PowerState(ctx); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSensors is one sensor poll of a validate phase (every
// telemetry interval of a diagnostic run).
func BenchmarkSensors(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if s, err := c.Sensors(ctx); err != nil || len(s.Readings) == 0 {
			b.Fatalf("Sensors = %+v, %v", s, err)
		}
	}
}
