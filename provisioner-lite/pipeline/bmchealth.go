package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
)

// BMCHealth is the part of the Redfish driver that reads a BMC's health. A
// BMC connection without it is recorded as offering none of it.
type BMCHealth interface {
	Sensors(ctx context.Context) (*redfish.Sensors, error)
	PowerSupplies(ctx context.Context) ([]redfish.Part, error)
	Fans(ctx context.Context) ([]redfish.Part, error)
	EventLog(ctx context.Context, since, until time.Time, max int) (*redfish.EventLog, error)
}

// minBMCInterval keeps a suite from polling a BMC harder than this.
const minBMCInterval = 100 * time.Millisecond

// bmcInterval is how often the BMC's sensors are polled during the suite's
// validate phase: the shortest BMCInterval of its stages that sample
// telemetry (manifests.DefaultBMCInterval where one leaves it unset), def
// when none does; never faster than minBMCInterval.
func bmcInterval(s *manifests.ValidationSuite, def time.Duration) time.Duration {
	d := time.Duration(0)
	if s != nil {
		for _, st := range s.Spec.Stages {
			if st.Telemetry == nil {
				continue
			}
			v := time.Duration(st.Telemetry.BMCInterval)
			if v <= 0 {
				v = time.Duration(manifests.DefaultBMCInterval)
			}
			if d == 0 || v < d {
				d = v
			}
		}
	}
	if d == 0 {
		d = def
	}
	return max(d, minBMCInterval)
}

// validating says whether the suite modes' validate phase is in batch.
func validating(r *store.Run, batch []modes.PhaseName) bool {
	m := r.Mode
	return (m == modes.Diagnostic || m == modes.Burnin) && slices.Contains(batch, modes.Validate)
}

// startBMCTelemetry polls the BMC's sensors into the run's series while its
// validate phase runs (a no-op for a batch without one); the returned stop
// ends the polling and waits for it. The poller keeps its own copy of the
// run (the run's goroutine owns r) and hears of the validate phase's start
// and end from begin and end (validateChanged).
func (bm *bmcCtl) startBMCTelemetry(ctx context.Context, r *store.Run, batch []modes.PhaseName) (stop func()) {
	if !validating(r, batch) {
		return func() {}
	}
	var suite *manifests.ValidationSuite
	if _, doc, err := bm.cfg.Manifests.LoadDocument(r.Manifest); err == nil {
		suite = doc.Suite
	}
	p := &bmcPoller{ctl: bm, run: *r, interval: bmcInterval(suite, bm.cfg.Timeouts.BMCPoll), wake: make(chan struct{}, 1)}
	// A run resumed mid-phase (a coordinator restart) may not see the
	// phase start again.
	if ps, err := bm.cfg.Store.Phases(ctx, r.ID); err == nil {
		for _, ph := range ps {
			if ph.Name == modes.Validate && ph.Status == curev1.PhaseStatus_PHASE_RUNNING {
				p.running.Store(true)
			}
		}
	}
	bm.pollers.Store(r.ID, p)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.loop(pctx)
	}()
	return func() {
		cancel()
		<-done
		bm.pollers.CompareAndDelete(r.ID, p)
	}
}

// validateChanged tells the run's poller, if any, that its validate phase
// started or ended.
func (bm *bmcCtl) validateChanged(runID string, running bool) {
	if v, ok := bm.pollers.Load(runID); ok {
		p := v.(*bmcPoller)
		p.running.Store(running)
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// bmcPoller is one validate phase's polling of its BMC's sensors.
type bmcPoller struct {
	ctl      *bmcCtl
	run      store.Run
	interval time.Duration
	running  atomic.Bool
	wake     chan struct{}
	b        BMC
	// lastErr is the last failure reported in the timeline (reported once
	// until the reading works again).
	lastErr string
	polls   int
}

func (p *bmcPoller) loop(ctx context.Context) {
	defer p.close()
	var next time.Time // zero: not polling (validate not running)
	for {
		if !p.running.Load() {
			next = time.Time{}
		} else if next.IsZero() || !time.Now().Before(next) {
			if stop := p.poll(ctx); stop {
				return
			}
			next = time.Now().Add(p.interval)
		}
		var tick <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			tick = t.C
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-tick:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (p *bmcPoller) close() {
	if p.b != nil {
		cctx, cancel := context.WithTimeout(context.Background(), p.ctl.cfg.Timeouts.BMCCall)
		defer cancel()
		_ = p.b.Close(cctx)
		p.b = nil
	}
}

// poll reads the sensors once into the run's series. It reports true when
// polling should stop: the BMC offers no sensors.
func (p *bmcPoller) poll(ctx context.Context) (stop bool) {
	cctx, cancel := context.WithTimeout(ctx, 4*p.ctl.cfg.Timeouts.BMCCall)
	defer cancel()
	if p.b == nil {
		b, err := p.ctl.connectBMC(cctx, p.run.NodeID)
		if err != nil {
			p.report(ctx, fmt.Sprintf("BMC sensors not read: %v", err))
			return false
		}
		p.b = b
	}
	h, ok := p.b.(BMCHealth)
	if !ok {
		p.report(ctx, "BMC sensors not polled: this BMC connection reads no sensors")
		return true
	}
	at := time.Now()
	s, err := h.Sensors(cctx)
	switch {
	case redfish.IsNotSupported(err):
		p.report(ctx, fmt.Sprintf("BMC sensors not polled: the BMC offers none (%v)", err))
		return true
	case err != nil:
		p.report(ctx, fmt.Sprintf("BMC sensors not read: %v", err))
		p.close() // a fresh session next time
		return false
	}
	res, err := p.ctl.cfg.Store.AppendSeries(context.WithoutCancel(ctx), p.run.ID, sensorSeries(s, at))
	if err != nil {
		p.ctl.cfg.Log.Error("store BMC sensor series", "run", p.run.ID, "err", err)
		return false
	}
	p.polls++
	if p.polls == 1 || p.lastErr != "" {
		p.lastErr = ""
		msg := fmt.Sprintf("BMC sensors polled every %s from %s: %d readings", p.interval, s.Source, len(s.Readings))
		if res.Refused > 0 {
			msg += fmt.Sprintf(" (%d series over the run's bound not kept)", res.Refused)
		}
		p.ctl.coordEvent(context.WithoutCancel(ctx), p.run, modes.Validate, runstate.EventInfo, "", msg, 0)
	}
	return false
}

// report puts a polling problem in the timeline once (until it changes).
func (p *bmcPoller) report(ctx context.Context, msg string) {
	msg = textsafe.Bounded(msg, 1024)
	if msg == p.lastErr {
		return
	}
	p.lastErr = msg
	p.ctl.cfg.Log.Warn(msg, "run", p.run.ID, "node", p.run.NodeID)
	p.ctl.coordEvent(context.WithoutCancel(ctx), p.run, modes.Validate, runstate.EventInfo, "", msg, 0)
}

// connectBMC opens a BMC connection for a step that does not own the run
// (no pending-reset handling: no BMC reset happens in the suite modes).
func (bm *bmcCtl) connectBMC(ctx context.Context, nodeID string) (BMC, error) {
	n, err := bm.cfg.Store.GetNode(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, bm.cfg.Timeouts.BMCCall)
	defer cancel()
	start := time.Now()
	b, err := bm.cfg.ConnectBMC(cctx, n)
	if err != nil {
		bm.cfg.Metrics.RedfishCall("", "connect", time.Since(start), err)
		return nil, fmt.Errorf("bmc %s: %w", n.BMCURL, err)
	}
	b = metered(b, bm.cfg.Metrics)
	if mb, ok := b.(*meteredBMC); ok {
		mb.obs("connect", start, nil)
	}
	return b, nil
}

// sensorSeries turns one reading of the sensors into one point per series.
func sensorSeries(s *redfish.Sensors, at time.Time) []store.Series {
	var out []store.Series
	for _, r := range s.Readings {
		out = append(out, store.Series{
			Source: runstate.SeriesBMC, Component: textsafe.BoundedLine("bmc/"+r.Key, 160), Metric: sensorMetric(r.Kind, r.Units),
			Unit: textsafe.BoundedLine(r.Units, 16), Times: []int64{at.UnixMilli()}, Values: []float64{r.Value},
		})
	}
	return out
}

// sensorMetric names a reading's series metric as the host's series do.
func sensorMetric(kind, units string) string {
	switch kind {
	case "temperature":
		return "temp_c"
	case "fan":
		return "fan_rpm"
	case "power":
		return "power_w"
	case "voltage":
		return "voltage_v"
	case "current":
		return "current_a"
	case "energy":
		return "energy_" + strings.ToLower(units)
	case "frequency":
		return "freq_hz"
	case "percent":
		return "percent"
	}
	return "reading"
}

// collectBMCEvidence reads what the BMC shows of the run so far — its log
// entries since the run started, its PSUs and fans — and stores it with
// the run. What the BMC does not offer, or cannot give, is recorded in the
// evidence, never a failure of the run.
func (bm *bmcCtl) collectBMCEvidence(ctx context.Context, r *store.Run) {
	ctx = context.WithoutCancel(ctx)
	now := time.Now().UTC()
	coll := &curev1.BmcCollection{CollectedUnixMs: now.UnixMilli(), WindowStartUnixMs: r.StartedAt.UnixMilli(), WindowEndUnixMs: now.UnixMilli()}
	ev := &curev1.BmcEvidence{Collection: coll}
	note := func(resource string, err error) {
		coll.Notes = append(coll.Notes, &curev1.BmcNote{Resource: resource, Message: textsafe.Bounded(err.Error(), 1024), Unsupported: redfish.IsNotSupported(err)})
	}
	err := bm.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		h, ok := b.(BMCHealth)
		if !ok {
			note("bmc", fmt.Errorf("%w: this BMC connection reads no health resources", redfish.ErrNotSupported))
			return nil
		}
		if log, err := h.EventLog(ctx, r.StartedAt, now, redfish.DefaultLogEntries); err != nil {
			note("event_log", err)
		} else {
			coll.LogServices = log.Services
			coll.LogEntriesRead, coll.LogEntriesDropped = uint32(log.Read), uint32(log.Dropped)
			for _, n := range log.Notes {
				note("event_log", errors.New(n))
			}
			for _, le := range log.Entries {
				ev.Log = append(ev.Log, &curev1.BmcLogEntry{Service: le.Service, Id: le.ID, CreatedUnixMs: le.Created.UnixMilli(),
					Severity: le.Severity, Message: le.Message, MessageId: le.MessageID, SensorType: le.SensorType,
					EntryType: le.EntryType, EntryCode: le.EntryCode})
			}
		}
		if ps, err := h.PowerSupplies(ctx); err != nil {
			note("power_supplies", err)
		} else {
			ev.PowerSupplies = partsProto(ps)
		}
		if fs, err := h.Fans(ctx); err != nil {
			note("fans", err)
		} else {
			ev.Fans = partsProto(fs)
		}
		return nil
	})
	if err != nil {
		note("bmc", err)
	}
	doc, err := protojson.Marshal(ev)
	if err != nil {
		bm.cfg.Log.Error("encode BMC evidence", "run", r.ID, "err", err)
		return
	}
	if err := bm.cfg.Store.PutBMCEvidence(ctx, r.ID, now, doc); err != nil {
		bm.cfg.Log.Error("store BMC evidence", "run", r.ID, "err", err)
		return
	}
	bm.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", evidenceSummary(ev), 0)
}

func partsProto(ps []redfish.Part) []*curev1.BmcPart {
	var out []*curev1.BmcPart
	for _, p := range ps {
		out = append(out, &curev1.BmcPart{Id: p.ID, Name: p.Name, Manufacturer: p.Manufacturer, Model: p.Model,
			PartNumber: p.PartNumber, SerialNumber: p.SerialNumber, SparePartNumber: p.SparePartNumber,
			FirmwareVersion: p.FirmwareVersion, Health: p.Health, State: p.State, Location: p.Location})
	}
	return out
}

// evidenceSummary is the timeline line of a BMC evidence read.
func evidenceSummary(ev *curev1.BmcEvidence) string {
	sev := map[string]int{}
	for _, l := range ev.GetLog() {
		sev[l.GetSeverity()]++
	}
	bad := func(ps []*curev1.BmcPart) int {
		n := 0
		for _, p := range ps {
			if p.GetHealth() == "Warning" || p.GetHealth() == "Critical" {
				n++
			}
		}
		return n
	}
	msg := fmt.Sprintf("BMC evidence: %d log entries in the run window (%d Critical, %d Warning), %d PSUs (%d unhealthy), %d fans (%d unhealthy)",
		len(ev.GetLog()), sev["Critical"], sev["Warning"], len(ev.GetPowerSupplies()), bad(ev.GetPowerSupplies()), len(ev.GetFans()), bad(ev.GetFans()))
	var not []string
	for _, n := range ev.GetCollection().GetNotes() {
		if n.GetUnsupported() && !slices.Contains(not, n.GetResource()) {
			not = append(not, n.GetResource())
		}
	}
	if len(not) > 0 {
		msg += "; not offered by the BMC: " + strings.Join(not, ", ")
	}
	return msg
}

// bmcEvidenceAtEnd reads the BMC evidence of a suite run that ends without
// it (it failed before its validate phase): the log of a node that never
// got that far is the evidence most wanted.
func (bm *bmcCtl) bmcEvidenceAtEnd(ctx context.Context, r *store.Run) {
	if m := r.Mode; m != modes.Diagnostic && m != modes.Burnin {
		return
	}
	if _, _, err := bm.cfg.Store.BMCEvidence(context.WithoutCancel(ctx), r.ID); !errors.Is(err, store.ErrNotFound) {
		return
	}
	bm.collectBMCEvidence(ctx, r)
}

var _ BMCHealth = (*redfish.Client)(nil)
