package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// partialBMC offers an event log and fans, no PSUs (ErrNotSupported), and
// fails its sensors.
type partialBMC struct {
	BMC
	since, until time.Time
}

func (b *partialBMC) Close(context.Context) error { return nil }
func (b *partialBMC) Sensors(context.Context) (*redfish.Sensors, error) {
	return nil, errors.New("HTTP 500")
}
func (b *partialBMC) PowerSupplies(context.Context) ([]redfish.Part, error) {
	return nil, fmt.Errorf("%w: no chassis offers power supplies", redfish.ErrNotSupported)
}
func (b *partialBMC) Fans(context.Context) ([]redfish.Part, error) {
	return nil, errors.New("connection reset by peer")
}
func (b *partialBMC) EventLog(_ context.Context, since, until time.Time, _ int) (*redfish.EventLog, error) {
	b.since, b.until = since, until
	return &redfish.EventLog{Services: []string{"Sel"}, Read: 3, Entries: []redfish.LogEntry{
		{Service: "Sel", ID: "7", Created: since.Add(time.Second), Severity: "Critical", Message: "CPU 1 temperature above critical", SensorType: "Temperature"},
	}, Notes: []string{"log Sel: 1 entries without a readable Created time left out"}}, nil
}

// plainBMC reads no health resources at all.
type plainBMC struct{ BMC }

func (plainBMC) Close(context.Context) error { return nil }

func evidenceEngine(t *testing.T, connect func(context.Context, store.Node) (BMC, error)) (*Engine, *store.Store, store.Run) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: "s", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "diagnostic", Manifest: "s", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().Add(-time.Minute).UTC()}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	e := New(ctx, Config{Store: st, Hub: sessions.NewHub(), Timeouts: Timeouts{BMCCall: time.Second}, ConnectBMC: connect})
	return e, st, run
}

func storedEvidence(t *testing.T, st *store.Store) *curev1.BmcEvidence {
	t.Helper()
	_, doc, err := st.BMCEvidence(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	var ev curev1.BmcEvidence
	if err := protojson.Unmarshal(doc, &ev); err != nil {
		t.Fatal(err)
	}
	return &ev
}

// What the BMC does not offer is recorded as such, what fails as a
// failure; neither keeps the rest from being stored.
func TestBMCEvidenceRecordsWhatIsMissing(t *testing.T) {
	bmc := &partialBMC{}
	e, st, run := evidenceEngine(t, func(context.Context, store.Node) (BMC, error) { return bmc, nil })
	e.bmc.collectBMCEvidence(context.Background(), &run)
	ev := storedEvidence(t, st)
	if !bmc.since.Equal(run.StartedAt) || bmc.until.Before(bmc.since) {
		t.Errorf("window %s..%s, want from the run's start %s", bmc.since, bmc.until, run.StartedAt)
	}
	if len(ev.GetLog()) != 1 || ev.GetLog()[0].GetSeverity() != "Critical" || ev.GetLog()[0].GetSensorType() != "Temperature" {
		t.Errorf("log %v", ev.GetLog())
	}
	notes := map[string]*curev1.BmcNote{}
	for _, n := range ev.GetCollection().GetNotes() {
		notes[n.GetResource()] = n
	}
	if n := notes["power_supplies"]; n == nil || !n.GetUnsupported() {
		t.Errorf("PSUs not offered: note %v", n)
	}
	if n := notes["fans"]; n == nil || n.GetUnsupported() || !strings.Contains(n.GetMessage(), "reset by peer") {
		t.Errorf("fans failing: note %v", n)
	}
	if n := notes["event_log"]; n == nil || !strings.Contains(n.GetMessage(), "without a readable Created") {
		t.Errorf("the driver's note on the log: %v", n)
	}
	evs, err := st.Events(context.Background(), "r1", 0, 0)
	if err != nil || len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Message, "1 log entries in the run window (1 Critical") ||
		!strings.Contains(evs[len(evs)-1].Message, "not offered by the BMC: power_supplies") {
		t.Errorf("timeline: %+v %v", evs, err)
	}

	// A connection that reads no health at all, and a BMC that cannot be
	// reached: recorded, nothing else.
	for name, connect := range map[string]func(context.Context, store.Node) (BMC, error){
		"plain":       func(context.Context, store.Node) (BMC, error) { return plainBMC{}, nil },
		"unreachable": func(context.Context, store.Node) (BMC, error) { return nil, errors.New("connection refused") },
	} {
		e, st, run := evidenceEngine(t, connect)
		e.bmc.collectBMCEvidence(context.Background(), &run)
		ev := storedEvidence(t, st)
		ns := ev.GetCollection().GetNotes()
		if len(ns) != 1 || ns[0].GetResource() != "bmc" || ns[0].GetUnsupported() != (name == "plain") || len(ev.GetLog()) != 0 {
			t.Errorf("%s: notes %v", name, ns)
		}
	}
}

// A suite run that ends before its validate phase still gets its BMC
// evidence, once; other modes never do.
func TestBMCEvidenceAtEnd(t *testing.T) {
	bmc := &partialBMC{}
	e, st, run := evidenceEngine(t, func(context.Context, store.Node) (BMC, error) { return bmc, nil })
	e.bmc.bmcEvidenceAtEnd(context.Background(), &run)
	first, _, err := st.BMCEvidence(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	e.bmc.bmcEvidenceAtEnd(context.Background(), &run)
	if again, _, _ := st.BMCEvidence(context.Background(), "r1"); !again.Equal(first) {
		t.Error("evidence read again at the end of a run that had it")
	}
	e2, st2, run2 := evidenceEngine(t, func(context.Context, store.Node) (BMC, error) { return bmc, nil })
	run2.Mode = "provision"
	e2.bmc.bmcEvidenceAtEnd(context.Background(), &run2)
	if _, _, err := st2.BMCEvidence(context.Background(), "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a provision run got BMC evidence: %v", err)
	}
}

func TestBMCInterval(t *testing.T) {
	tel := func(d time.Duration) *manifests.Telemetry {
		return &manifests.Telemetry{BMCInterval: manifests.Duration(d)}
	}
	for _, tc := range []struct {
		stages []manifests.Stage
		want   time.Duration
	}{
		{nil, 45 * time.Second},
		{[]manifests.Stage{{Name: "a"}}, 45 * time.Second},
		{[]manifests.Stage{{Name: "a", Telemetry: tel(15 * time.Second)}, {Name: "b", Telemetry: tel(5 * time.Second)}, {Name: "c"}}, 5 * time.Second},
		{[]manifests.Stage{{Name: "a", Telemetry: tel(0)}, {Name: "b", Telemetry: tel(time.Minute)}}, 30 * time.Second},
		{[]manifests.Stage{{Name: "a", Telemetry: tel(time.Millisecond)}}, minBMCInterval},
	} {
		s := &manifests.ValidationSuite{Spec: manifests.ValidationSuiteSpec{Stages: tc.stages}}
		if got := bmcInterval(s, 45*time.Second); got != tc.want {
			t.Errorf("stages %+v: %s, want %s", tc.stages, got, tc.want)
		}
	}
}

func TestSensorSeries(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	got := sensorSeries(&redfish.Sensors{Readings: []redfish.SensorReading{
		{Key: "Sensors/CPU1Temp", Kind: "temperature", Units: "C", Value: 61},
		{Key: "Fans/Fan 1", Kind: "fan", Units: "RPM", Value: 9000},
		{Key: "Sensors/PSU1Energy", Kind: "energy", Units: "kWh", Value: 12.5},
	}}, at)
	var s []string
	for _, g := range got {
		s = append(s, fmt.Sprintf("%s %s %s %s %v@%d", g.Source, g.Component, g.Metric, g.Unit, g.Values, g.Times[0]))
	}
	want := "bmc bmc/Sensors/CPU1Temp temp_c C [61]@1700000000123|bmc bmc/Fans/Fan 1 fan_rpm RPM [9000]@1700000000123|bmc bmc/Sensors/PSU1Energy energy_kwh kWh [12.5]@1700000000123"
	if strings.Join(s, "|") != want {
		t.Errorf("sensorSeries:\n got %s\nwant %s", strings.Join(s, "|"), want)
	}
}
