package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fwPackage is a virtual-BMC firmware package for spec component id.
func fwPackage(component, version string) []byte {
	payload := []byte("image " + component + " " + version)
	sum := sha256.Sum256(payload)
	h := vbmc.PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	return append(h.Line(), payload...)
}

// member finds the one running inventory member the matcher selects.
func member(t *testing.T, c *redfish.Client, m manifests.Match) redfish.FirmwareItem {
	t.Helper()
	inv, err := c.FirmwareInventory(context.Background())
	if err != nil {
		t.Fatalf("FirmwareInventory: %v", err)
	}
	var got []redfish.FirmwareItem
	for _, it := range inv {
		ok, err := pipeline.MatchMember(m, it)
		if err != nil {
			t.Fatalf("matcher %+v: %v", m, err)
		}
		if ok {
			got = append(got, it)
		}
	}
	if len(got) != 1 {
		t.Fatalf("matcher %+v selects %d members of %+v, want exactly 1", m, len(got), inv)
	}
	return got[0]
}

// TestVendorProfilesConformance runs the real driver against the live
// virtual BMC of every vendor profile: power, boot override (one-time and
// persistent), inventory by a Name matcher, a firmware update with task
// following and activation (SimpleUpdate where the BMC can fetch the
// artifact, multipart push otherwise), BIOS settings and a manager reset;
// the health readers (sensors, PSUs and fans, the event log) in between.
func TestVendorProfilesConformance(t *testing.T) {
	for _, p := range vbmc.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			cfg := p.Apply(vbmc.Config{Name: p.Name, TaskDuration: 100 * time.Millisecond, ResetDuration: 300 * time.Millisecond, Logger: logger(t)})
			m := vbmc.NewFakeMachine()
			b, err := vbmc.New(cfg, m)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(context.Background()) })
			srv, err := vbmc.Listen("127.0.0.1:0", b, true)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Shutdown(context.Background()) })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := redfish.Connect(ctx, redfish.Endpoint{URL: srv.URL, Username: "admin", Password: "password", Fingerprint: srv.Fingerprint()},
				redfish.Options{Timeout: 5 * time.Second, Logger: logger(t)})
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })

			// Power.
			if err := c.PowerOn(ctx); err != nil {
				t.Fatalf("PowerOn: %v", err)
			}
			if err := c.WaitPowerState(ctx, "On", 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if err := c.Reset(ctx, "ForceRestart"); err != nil {
				t.Fatalf("ForceRestart: %v", err)
			}

			// Sensors, PSUs and fans, and the event log of a window.
			checkHealth(t, ctx, c, b, cfg)

			// Boot override: one-time PXE, then persistent disk (or, where
			// the BMC has no persistent override, a clear refusal).
			if err := c.SetBootOverride(ctx, redfish.BootPxe, true); err != nil {
				t.Fatalf("one-time PXE: %v", err)
			}
			if tgt, en, err := c.BootOverride(ctx); err != nil || tgt != redfish.BootPxe || en != "Once" {
				t.Fatalf("after one-time PXE: %s %s %v", tgt, en, err)
			}
			err = c.SetBootOverride(ctx, redfish.BootHdd, false)
			switch {
			case cfg.NoContinuous && err != nil && !errors.Is(err, redfish.ErrNotSupported):
				t.Fatalf("persistent disk on a BMC without Continuous: %v, want ErrNotSupported or success", err)
			case !cfg.NoContinuous && err != nil:
				t.Fatalf("persistent disk: %v", err)
			case err == nil:
				// Without Continuous the driver disables the override so
				// the disk-first boot order applies.
				if tgt, en, err := c.BootOverride(ctx); err != nil || !(tgt == redfish.BootHdd || cfg.NoContinuous && en == "Disabled") {
					t.Fatalf("after persistent disk: %s %s %v", tgt, en, err)
				}
			}

			// Graceful power-off: allowed even where the BMC runs the
			// allowable values together.
			if err := c.PowerOff(ctx, false); err != nil {
				t.Fatalf("graceful PowerOff: %v", err)
			}
			if err := c.WaitPowerState(ctx, "Off", 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}

			// Inventory by Name, whatever the Id convention.
			bmcID := p.BMCID
			if bmcID == "" {
				bmcID = "BMC"
			}
			bmcMatch := manifests.Match{Name: p.BMCName, Updateable: ptr(true)}
			if p.BMCName == "" {
				bmcMatch = manifests.Match{RedfishID: bmcID}
			}
			before := member(t, c, bmcMatch)
			// The same member through the link to its Manager, whatever
			// the Id says.
			if rel := member(t, c, manifests.Match{RelatedItem: "/redfish/v1/Managers/*", Updateable: ptr(true)}); rel.ID != before.ID {
				t.Fatalf("relatedItem selects %s, name selects %s", rel.ID, before.ID)
			}
			fw := manifests.Firmware{Name: "bmc", Gate: manifests.GateAtLeast, Version: before.Version, Match: bmcMatch}
			if st, msg := pipeline.GateVerdict(fw, before.Version); st != curev1.VerdictStatus_MATCH {
				t.Fatalf("version %q against itself under at-least: %s %s", before.Version, st, msg)
			}

			// Firmware update with task following, then activation by a
			// manager reset, verified through the matcher.
			const newVersion = "9.99.1"
			pkg := fwPackage(bmcID, newVersion)
			art := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(pkg) }))
			t.Cleanup(art.Close)
			caps, err := c.UpdateService(ctx)
			if err != nil {
				t.Fatalf("UpdateService: %v", err)
			}
			var job *redfish.Job
			imageURI := art.URL + "/bmc.fw"
			if caps.SimpleUpdateFetches(imageURI) {
				job, err = c.SimpleUpdate(ctx, imageURI, []string{before.ID}, "")
			} else {
				if caps.MultipartPushURI == "" {
					t.Fatalf("profile offers no way to update from %s: %+v", imageURI, caps)
				}
				job, err = c.MultipartPush(ctx, bytes.NewReader(pkg), int64(len(pkg)), []string{before.ID})
			}
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			res, err := c.WaitTask(ctx, job, 20*time.Millisecond)
			if err != nil || (res.State != "Completed" && res.State != redfish.TaskGone) {
				t.Fatalf("WaitTask = %+v, %v", res, err)
			}
			if err := c.ResetManager(ctx, "GracefulRestart"); err != nil {
				t.Fatalf("ResetManager: %v", err)
			}
			if err := c.WaitBMC(ctx, 20*time.Second); err != nil {
				t.Fatalf("WaitBMC: %v", err)
			}
			after := member(t, c, bmcMatch)
			fw.Version = newVersion
			if st, msg := pipeline.GateVerdict(fw, after.Version); st != curev1.VerdictStatus_MATCH || b.Flashes(bmcID) != 1 {
				t.Fatalf("after update and reset: member %+v: %s %s, flashed %d times", after, st, msg, b.Flashes(bmcID))
			}

			// BIOS settings: staged for the next boot, in effect after it.
			if err := c.SetBiosAttributes(ctx, map[string]any{"ProcTurboMode": "Disabled"}); err != nil {
				t.Fatalf("SetBiosAttributes: %v", err)
			}
			if s := b.StagedBiosAttributes(); s["ProcTurboMode"] != "Disabled" {
				t.Fatalf("staged BIOS attributes = %v", s)
			}
			if err := c.PowerOn(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(ctx, func() bool {
				cur, err := c.BiosAttributes(ctx)
				return err == nil && cur["ProcTurboMode"] == "Disabled"
			}); err != nil {
				t.Fatalf("BIOS setting after boot: %v", err)
			}
			if cfg.MaxSessions > 0 && b.SessionCount() > cfg.MaxSessions {
				t.Fatalf("%d sessions open, the BMC allows %d", b.SessionCount(), cfg.MaxSessions)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// waitFor polls cond until it holds or ctx ends (no timed assertion: the
// context is the budget).
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// TestVendorProfilesBootModes: the boot override's BootSourceOverrideMode
// against every profile, through the real driver. A mode the BMC lists is
// set (UEFI and legacy where the profile offers both); one it does not
// list is refused before anything is PATCHed (ErrNotSupported); auto takes
// UEFI for a network boot where offered; a BMC without the property is left
// to its firmware setting.
func TestVendorProfilesBootModes(t *testing.T) {
	for _, p := range vbmc.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			cfg := p.Apply(vbmc.Config{Name: p.Name, TaskDuration: 100 * time.Millisecond, ResetDuration: 300 * time.Millisecond, Logger: logger(t)})
			b, err := vbmc.New(cfg, vbmc.NewFakeMachine())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(context.Background()) })
			srv, err := vbmc.Listen("127.0.0.1:0", b, true)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Shutdown(context.Background()) })
			allowed := cfg.BootModes
			if len(allowed) == 0 && !cfg.NoBootMode {
				allowed = []string{"Legacy"} // the virtual BMC's default, as its System shows
			}
			for _, pol := range []redfish.BootModePolicy{redfish.BootModeUEFI, redfish.BootModeLegacy, redfish.BootModeAuto} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c, err := redfish.Connect(ctx, redfish.Endpoint{URL: srv.URL, Username: "admin", Password: "password", Fingerprint: srv.Fingerprint()},
					redfish.Options{Timeout: 5 * time.Second, Logger: logger(t), BootMode: pol})
				if err != nil {
					cancel()
					t.Fatalf("%s: Connect: %v", pol, err)
				}
				before := b.BootMode()
				err = c.SetBootOverride(ctx, redfish.BootPxe, true)
				want := map[redfish.BootModePolicy]string{redfish.BootModeUEFI: "UEFI", redfish.BootModeLegacy: "Legacy"}[pol]
				if pol == redfish.BootModeAuto {
					want = before
					if slices.Contains(allowed, "UEFI") {
						want = "UEFI"
					}
				}
				switch {
				case cfg.NoBootMode:
					if err != nil || b.BootMode() != "" {
						t.Errorf("%s on a BMC without BootSourceOverrideMode: err %v, mode %q; want the override set, the mode left alone", pol, err, b.BootMode())
					}
				case slices.Contains(allowed, want):
					if err != nil || b.BootMode() != want {
						t.Errorf("%s with allowable %v: err %v, mode %q, want %q", pol, allowed, err, b.BootMode(), want)
					}
					if tgt, en, err := c.BootOverride(ctx); err != nil || tgt != redfish.BootPxe || en != "Once" {
						t.Errorf("%s: override after setting it: %s %s %v", pol, tgt, en, err)
					}
				default:
					if !errors.Is(err, redfish.ErrNotSupported) || b.BootMode() != before {
						t.Errorf("%s with allowable %v: err %v, mode %q (was %q); want ErrNotSupported and nothing changed", pol, allowed, err, b.BootMode(), before)
					}
				}
				c.Close(ctx)
				cancel()
			}
		})
	}
}
