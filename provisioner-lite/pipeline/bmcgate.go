package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
)

// The BMC's evidence of a suite run is judged against the suite's bars
// (manifests.BMCBars, DefaultBMCBars where it names none) before the run can
// end succeeded: a failed bar is a FAIL verdict naming the part, and
// evidence a bar needs but cannot have is an ERROR (component bmc), which
// fails the run too. Under a default bar only a resource the BMC does not
// offer at all is left unjudged (and the timeline says so); a bar the suite
// set fails closed even then.

const (
	bmcComponent = "bmc"
	// maxBMCFails bounds the FAIL verdicts of one kind a run gets (a BMC
	// logging a storm of Critical entries); the last says how many more.
	maxBMCFails = 32
)

// bmcJudgement is the evidence against the bars.
type bmcJudgement struct {
	fails     []store.Verdict
	errs      []bmcError
	notJudged []string
}

// bmcError is what a bar could not judge: check names the bar.
type bmcError struct{ check, msg string }

func (j *bmcJudgement) errorf(check, format string, a ...any) {
	j.errs = append(j.errs, bmcError{check, fmt.Sprintf(format, a...)})
}

// bmcGate judges the run's BMC evidence: the message of a failure ("" when
// it passes), or an error naming what could not be judged.
func (bm *bmcCtl) bmcGate(ctx context.Context, r *store.Run) (string, error) {
	if !suiteMode(r) {
		return "", nil
	}
	ctx = context.WithoutCancel(ctx)
	fail := func(check string, err error) (string, error) {
		bm.errorVerdict(ctx, r, bmcComponent, check, err)
		return "", err
	}
	_, doc, err := bm.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return fail("bmc-bars", fmt.Errorf("bmc bars: suite %s: %w", r.Manifest, err))
	}
	if doc.Suite == nil {
		return fail("bmc-bars", fmt.Errorf("bmc bars: %s is a %s, not a ValidationSuite", r.Manifest, doc.Kind))
	}
	bars, explicit := doc.Suite.Spec.BMC.Effective()
	if bars.PowerSupplies == manifests.BMCIgnore && bars.Fans == manifests.BMCIgnore && bars.EventLog == manifests.BMCIgnore && len(bars.Sensors) == 0 {
		return "", nil
	}
	ev, err := bm.runBMCEvidence(ctx, r)
	if err != nil {
		return fail("bmc-evidence", fmt.Errorf("bmc evidence read: %w", err))
	}
	var series []store.Series
	if len(bars.Sensors) > 0 {
		if series, err = bm.cfg.Store.RunSeries(ctx, r.ID, runstate.SeriesBMC); err != nil {
			return fail("bmc-sensor-evidence", fmt.Errorf("bmc sensor series read: %w", err))
		}
	}
	j := judgeBMC(r.ID, bars, explicit, ev, series, time.Now().UTC())
	return bm.recordBMCJudgement(ctx, r, j)
}

// runBMCEvidence is the run's stored BMC evidence, read now where the
// validate phase's read is missing (a coordinator that stopped between).
func (bm *bmcCtl) runBMCEvidence(ctx context.Context, r *store.Run) (*curev1.BmcEvidence, error) {
	_, doc, err := bm.cfg.Store.BMCEvidence(ctx, r.ID)
	if errors.Is(err, store.ErrNotFound) {
		bm.collectBMCEvidence(ctx, r)
		_, doc, err = bm.cfg.Store.BMCEvidence(ctx, r.ID)
	}
	if err != nil {
		return nil, err
	}
	ev := &curev1.BmcEvidence{}
	if err := protojson.Unmarshal(doc, ev); err != nil {
		return nil, fmt.Errorf("decode the stored evidence: %w", err)
	}
	return ev, nil
}

// recordBMCJudgement stores the judgement's verdicts and tells the
// timeline.
func (bm *bmcCtl) recordBMCJudgement(ctx context.Context, r *store.Run, j bmcJudgement) (string, error) {
	var errs, fails []string
	for _, x := range j.errs {
		cause := errors.New("bmc evidence: " + x.msg)
		bm.errorVerdict(ctx, r, bmcComponent, x.check, cause)
		errs = append(errs, cause.Error())
	}
	for _, v := range j.fails {
		if err := bm.cfg.Store.PutVerdict(ctx, v); err != nil {
			cause := fmt.Errorf("bmc verdict of %s not stored: %w", v.Component, err)
			bm.cfg.Log.Error("store BMC verdict", "run", r.ID, "err", err)
			errs = append(errs, cause.Error())
		}
		bm.coordEvent(ctx, *r, modes.Validate, runstate.EventVerdict, runstate.VerdictName(v.Status), fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Message), 0)
		fails = append(fails, fmt.Sprintf("%s %s", v.Component, v.Message))
	}
	if len(j.notJudged) > 0 {
		bm.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", "BMC bars not judged (the BMC does not offer them; the default bars only): "+strings.Join(j.notJudged, "; "), 0)
	}
	if len(errs) > 0 {
		return "", errors.New(strings.Join(errs, "; "))
	}
	if len(fails) == 0 {
		return "", nil
	}
	return textsafe.Truncate("BMC evidence fails the suite's bars: "+strings.Join(fails, "; "), 4096), nil
}

// judgeBMC judges the evidence against the bars (pure).
func judgeBMC(runID string, bars manifests.BMCBars, explicit map[string]bool, ev *curev1.BmcEvidence, series []store.Series, now time.Time) bmcJudgement {
	var j bmcJudgement
	judgeParts(&j, partsBar{runID: runID, kind: "psu", label: "PSU", what: "PSUs", key: "powerSupplies", resource: "power_supplies", bar: bars.PowerSupplies, explicit: explicit["powerSupplies"]},
		ev, ev.GetPowerSupplies(), now)
	judgeParts(&j, partsBar{runID: runID, kind: "fan", label: "fan", what: "fans", key: "fans", resource: "fans", bar: bars.Fans, explicit: explicit["fans"]},
		ev, ev.GetFans(), now)
	judgeLog(&j, runID, bars.EventLog, explicit["eventLog"], ev, now)
	for _, sb := range bars.Sensors {
		judgeSensor(&j, runID, sb, series, now)
	}
	return j
}

type partsBar struct {
	runID, kind, label, what, key, resource, bar string
	explicit                                     bool
}

// unreadable is the note that says resource (or the whole BMC) could not
// be read, nil when it was.
func unreadable(ev *curev1.BmcEvidence, resource string) *curev1.BmcNote {
	for _, n := range ev.GetCollection().GetNotes() {
		if n.GetResource() == resource || n.GetResource() == "bmc" {
			return n
		}
	}
	return nil
}

func judgeParts(j *bmcJudgement, b partsBar, ev *curev1.BmcEvidence, parts []*curev1.BmcPart, now time.Time) {
	if b.bar == manifests.BMCIgnore {
		return
	}
	check := "bmc-" + b.kind + "-health"
	if n := unreadable(ev, b.resource); n != nil {
		if n.GetUnsupported() && !b.explicit {
			j.notJudged = append(j.notJudged, fmt.Sprintf("%s: %s", b.what, n.GetMessage()))
			return
		}
		j.errorf(check, "%s unreadable under the bar %s: %s", b.what, b.key, n.GetMessage())
		return
	}
	if len(parts) == 0 {
		if b.explicit {
			j.errorf(check, "the BMC reports no %s, and the suite bars them (%s: %s)", b.what, b.key, b.bar)
		} else {
			j.notJudged = append(j.notJudged, fmt.Sprintf("%s: the BMC reports none", b.what))
		}
		return
	}
	n := 0
	for _, p := range parts {
		if p.GetState() == "Absent" || p.GetHealth() == "OK" {
			continue
		}
		if p.GetHealth() == "" {
			j.errorf(check, "%s %s reports no health (state %q)", b.label, partName(p), p.GetState())
			continue
		}
		if n++; n > maxBMCFails {
			continue
		}
		j.fails = append(j.fails, store.Verdict{RunID: b.runID, Component: textsafe.BoundedLine("bmc/"+b.kind+"/"+p.GetId(), 160), Check: check,
			Status: curev1.VerdictStatus_FAIL, Time: now, Observed: fmt.Sprintf("health=%s state=%s", p.GetHealth(), p.GetState()), Expected: "health=OK",
			Message: textsafe.Bounded(fmt.Sprintf("%s %s health %s (serial %s)", b.label, partName(p), p.GetHealth(), nonEmpty(p.GetSerialNumber(), "unknown")), 1024)})
	}
	if n > maxBMCFails {
		j.errorf(check, "%d more unhealthy %s not listed", n-maxBMCFails, b.what)
	}
}

func partName(p *curev1.BmcPart) string {
	name := nonEmpty(p.GetName(), p.GetId())
	if p.GetLocation() != "" && p.GetLocation() != name {
		name += " (" + p.GetLocation() + ")"
	}
	return name
}

var severityRank = map[string]int{"OK": 0, manifests.BMCSeverityWarning: 1, manifests.BMCSeverityCritical: 2}

func judgeLog(j *bmcJudgement, runID, bar string, explicit bool, ev *curev1.BmcEvidence, now time.Time) {
	if bar == manifests.BMCIgnore {
		return
	}
	const check = "bmc-event-log"
	coll := ev.GetCollection()
	for _, n := range coll.GetNotes() {
		if n.GetResource() != "event_log" && n.GetResource() != "bmc" || cycleNote(n.GetMessage()) {
			continue
		}
		if n.GetUnsupported() && !explicit && len(coll.GetLogServices()) == 0 {
			j.notJudged = append(j.notJudged, "event log: "+n.GetMessage())
			return
		}
		// A log read in part could hide the entry the bar is for.
		j.errorf(check, "event log read incompletely under the bar eventLog: %s: %s", bar, n.GetMessage())
	}
	if d := coll.GetLogEntriesDropped(); d > 0 {
		j.errorf(check, "%d entries of the run's window were not read (over the bound) under the bar eventLog: %s", d, bar)
	}
	n := 0
	for _, l := range ev.GetLog() {
		rank, known := severityRank[l.GetSeverity()]
		if !known || rank < severityRank[bar] {
			continue
		}
		if n++; n > maxBMCFails {
			continue
		}
		at := time.UnixMilli(l.GetCreatedUnixMs()).UTC()
		j.fails = append(j.fails, store.Verdict{RunID: runID, Component: textsafe.BoundedLine("bmc/log/"+l.GetService()+"/"+l.GetId(), 160), Check: check,
			Status: curev1.VerdictStatus_FAIL, Time: now, At: at, Observed: "severity=" + l.GetSeverity(),
			Expected: fmt.Sprintf("no entry of severity %s or worse in the run's window", bar),
			Message:  textsafe.Bounded(fmt.Sprintf("%s entry at %s: %s (%s)", l.GetSeverity(), at.Format(time.RFC3339), l.GetMessage(), nonEmpty(l.GetMessageId(), "no message id")), 1024)})
	}
	if n > maxBMCFails {
		j.errorf(check, "%d more log entries at or over %s not listed", n-maxBMCFails, bar)
	}
}

// cycleNote says a log note reports a page linked twice: every page the
// log links was read (the reader stops where the links loop back), so
// nothing of the window is missing.
func cycleNote(msg string) bool { return strings.Contains(msg, "linked twice; stopped there") }

// judgeSensor holds every reading of the sensors sb matches to its limits:
// one FAIL per sensor and side, at its first reading past the limit.
func judgeSensor(j *bmcJudgement, runID string, sb manifests.SensorBar, series []store.Series, now time.Time) {
	matched := 0
	for _, s := range series {
		key := strings.TrimPrefix(s.Component, "bmc/")
		if ok, _ := path.Match(sb.Match, key); !ok || len(s.Values) == 0 {
			continue
		}
		matched++
		for _, side := range []struct {
			name  string
			limit *float64
			past  func(v, l float64) bool
			word  string
		}{{"max", sb.Max, func(v, l float64) bool { return v > l }, "over"}, {"min", sb.Min, func(v, l float64) bool { return v < l }, "under"}} {
			if side.limit == nil {
				continue
			}
			worst, first := -1, -1
			for i, v := range s.Values {
				if side.past(v, *side.limit) {
					if first < 0 {
						first = i
					}
					if worst < 0 || side.past(v, s.Values[worst]) {
						worst = i
					}
				}
			}
			if worst < 0 {
				continue
			}
			v := store.Verdict{RunID: runID, Component: s.Component, Check: "bmc-sensor-" + side.name, Status: curev1.VerdictStatus_FAIL, Time: now,
				Observed: fmt.Sprintf("%s=%s", s.Metric, withUnit(s.Values[worst], s.Unit)), Expected: fmt.Sprintf("%s %s %s (sensor bar %s)", s.Metric, map[string]string{"max": "<=", "min": ">="}[side.name], withUnit(*side.limit, s.Unit), sb.Match),
				Message: textsafe.Bounded(fmt.Sprintf("%s read %s, %s its limit %s (sensor bar %s)", key, withUnit(s.Values[worst], s.Unit), side.word, withUnit(*side.limit, s.Unit), sb.Match), 1024)}
			if first < len(s.Times) {
				v.At = time.UnixMilli(s.Times[first]).UTC()
			}
			j.fails = append(j.fails, v)
		}
	}
	if matched == 0 {
		j.errorf("bmc-sensor-evidence", "no sensor reading of the run matches the sensor bar %q (the BMC's sensors were not read, or none is named so)", sb.Match)
	}
}

func withUnit(v float64, unit string) string {
	if unit == "" {
		return fleetband.Num(v)
	}
	return fleetband.Num(v) + " " + unit
}
