package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// checkHealth runs the driver's health readers against a profile's live
// BMC (the host powered on): the sensors through the API the profile
// serves, PSUs and fans with identity and health, and the event log of a
// window across the profile's pages and order.
func checkHealth(t *testing.T, ctx context.Context, c *redfish.Client, b *vbmc.BMC, cfg vbmc.Config) {
	t.Helper()
	shape := b.LogShape()
	// Sensors: the profile's API, a pinned reading read back.
	if err := b.SetSensor("CPU1Temp", 77); err != nil {
		t.Fatal(err)
	}
	s, err := c.Sensors(ctx)
	if err != nil {
		t.Fatalf("Sensors: %v", err)
	}
	wantSource, cpuKey := redfish.SensorSourceSensors, "Sensors/CPU1Temp"
	if cfg.SensorAPI == vbmc.SensorAPILegacy {
		wantSource, cpuKey = redfish.SensorSourceLegacy, "Temperatures/CPU #1 Temperature"
	}
	kinds := map[string]bool{}
	var cpu *redfish.SensorReading
	for i, r := range s.Readings {
		kinds[r.Kind] = true
		if r.Key == cpuKey {
			cpu = &s.Readings[i]
		}
	}
	if s.Source != wantSource || cpu == nil || cpu.Value != 77 || !kinds["fan"] || !kinds["power"] {
		t.Fatalf("Sensors: source %q (want %q), CPU %+v, kinds %v", s.Source, wantSource, cpu, kinds)
	}

	// Parts: identity and health, a failure seen.
	if err := b.SetPartHealth(vbmc.PartPSU, "Bay2", "Critical", "Power supply 'PSU 2' has failed: AC input lost."); err != nil {
		t.Fatal(err)
	}
	psus, err := c.PowerSupplies(ctx)
	if err != nil {
		t.Fatalf("PowerSupplies: %v", err)
	}
	if len(psus) != 2 || psus[0].SerialNumber == "" || psus[0].PartNumber == "" || psus[0].Health != "OK" || psus[1].Health != "Critical" {
		t.Fatalf("PowerSupplies: %+v", psus)
	}
	fans, err := c.Fans(ctx)
	if err != nil {
		t.Fatalf("Fans: %v", err)
	}
	if len(fans) != 4 || fans[0].SerialNumber == "" || fans[0].Model == "" || fans[0].Health != "OK" {
		t.Fatalf("Fans: %+v", fans)
	}

	// The event log of a window: more entries than one page (up to a
	// bound), one entry backdated before the window and one after it.
	since := time.Now().Add(-10 * time.Minute)
	n := min(shape.PageSize+5, 60)
	for i := range n {
		if _, err := b.LogEvent(vbmc.Event{Severity: "Warning", Message: fmt.Sprintf("conformance %d", i), MessageID: "Test.1.0.Conformance", SensorType: "Temperature"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []time.Time{since.Add(-time.Hour), time.Now().Add(time.Hour)} {
		if _, err := b.LogEvent(vbmc.Event{Created: at, Severity: "Critical", Message: "outside the window"}); err != nil {
			t.Fatal(err)
		}
	}
	log, err := c.EventLog(ctx, since, time.Now().Add(time.Minute), 0)
	if err != nil {
		t.Fatalf("EventLog: %v", err)
	}
	if !slices.Contains(log.Services, shape.ID) {
		t.Fatalf("EventLog read %v, not the BMC's %s", log.Services, shape.ID)
	}
	var seen int
	var ids []string
	for _, e := range log.Entries {
		ids = append(ids, e.MessageID)
		switch {
		case e.Message == "outside the window":
			t.Fatalf("entry created %s is outside the window from %s", e.Created, since)
		case strings.HasPrefix(e.Message, "conformance "):
			seen++
			if e.Service != shape.ID || e.Severity != "Warning" || e.SensorType != "Temperature" || e.EntryType != shape.EntryType {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	if seen != n {
		t.Fatalf("EventLog kept %d of the %d entries of the window (pages of %d)", seen, n, shape.PageSize)
	}
	for _, want := range []string{vbmc.MsgHostPoweredOn, "Power.1.0.PowerSupplyFailed"} {
		if !slices.Contains(ids, want) {
			t.Fatalf("EventLog lacks %s (the BMC's own record): %v", want, ids)
		}
	}
	// Put the PSU back: the rest of the test boots the host.
	if err := b.SetPartHealth(vbmc.PartPSU, "Bay2", "OK", ""); err != nil {
		t.Fatal(err)
	}
	b.ClearSensor("CPU1Temp")
}
