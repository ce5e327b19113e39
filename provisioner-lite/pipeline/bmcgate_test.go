package pipeline

import (
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

func fp(x float64) *float64 { return &x }

// TestJudgeBMC: each bar's failure is a FAIL verdict naming the part (PSU,
// fan, log entry, sensor with its reading and limit); what a bar needs and
// cannot have is an ERROR; under a default bar a resource the BMC does not
// offer is only noted.
func TestJudgeBMC(t *testing.T) {
	now := time.Now().UTC()
	healthy := []*curev1.BmcPart{{Id: "Bay1", Name: "PSU 1", Health: "OK", State: "Enabled"}, {Id: "Bay3", Health: "", State: "Absent"}}
	ev := &curev1.BmcEvidence{
		Collection:    &curev1.BmcCollection{LogServices: []string{"Sel"}},
		PowerSupplies: append(healthy, &curev1.BmcPart{Id: "Bay2", Name: "PSU 2", Location: "PSU 2 slot", Health: "Critical", State: "Enabled", SerialNumber: "S-2"}),
		Fans:          []*curev1.BmcPart{{Id: "Fan1", Name: "Fan 1", Health: "Warning", State: "Enabled"}},
		Log: []*curev1.BmcLogEntry{{Service: "Sel", Id: "9", Severity: "Warning", Message: "fan 1 slow", CreatedUnixMs: now.UnixMilli()},
			{Service: "Sel", Id: "10", Severity: "OK", Message: "powered on"}},
	}
	series := []store.Series{{Component: "bmc/Sensors/CPU1Temp", Metric: "temp_c", Unit: "C", Times: []int64{1, 2, 3}, Values: []float64{60, 97, 99}},
		{Component: "bmc/Sensors/CPU2Temp", Metric: "temp_c", Unit: "C", Times: []int64{1}, Values: []float64{70}}}
	bars := manifests.BMCBars{PowerSupplies: "ok", Fans: "ignore", EventLog: "Warning", Sensors: []manifests.SensorBar{{Match: "Sensors/CPU*Temp", Max: fp(95)}, {Match: "Sensors/GPU*", Max: fp(90)}}}
	j := judgeBMC("r1", bars, map[string]bool{"powerSupplies": true, "fans": true, "eventLog": true}, ev, series, now)
	got := map[string]store.Verdict{}
	for _, v := range j.fails {
		got[v.Component+" "+v.Check] = v
	}
	if len(j.fails) != 3 {
		t.Errorf("fails %+v", j.fails)
	}
	if v := got["bmc/psu/Bay2 bmc-psu-health"]; v.Status != curev1.VerdictStatus_FAIL || v.Message != "PSU PSU 2 (PSU 2 slot) health Critical (serial S-2)" {
		t.Errorf("PSU verdict %+v", v)
	}
	if v := got["bmc/log/Sel/9 bmc-event-log"]; !strings.Contains(v.Message, "Warning entry at") || !strings.Contains(v.Message, "fan 1 slow") {
		t.Errorf("log verdict %+v", v)
	}
	if v := got["bmc/Sensors/CPU1Temp bmc-sensor-max"]; v.Message != "Sensors/CPU1Temp read 99 C, over its limit 95 C (sensor bar Sensors/CPU*Temp)" || v.At.UnixMilli() != 2 {
		t.Errorf("sensor verdict %+v", v)
	}
	if len(j.errs) != 1 || j.errs[0].check != "bmc-sensor-evidence" || !strings.Contains(j.errs[0].msg, `"Sensors/GPU*"`) {
		t.Errorf("errors %+v (a sensor bar that matches no reading is an ERROR)", j.errs)
	}

	// Unreadable: under a bar the suite set, ERROR; under a default bar, a
	// resource the BMC does not offer is noted, one it failed to give is
	// ERROR; a log cut short is ERROR.
	bad := &curev1.BmcEvidence{Collection: &curev1.BmcCollection{LogServices: []string{"Sel"}, LogEntriesDropped: 3, Notes: []*curev1.BmcNote{
		{Resource: "power_supplies", Message: "not supported: no chassis offers power supplies", Unsupported: true},
		{Resource: "fans", Message: "connection reset by peer"},
	}}}
	j = judgeBMC("r1", manifests.DefaultBMCBars(), nil, bad, nil, now)
	var checks []string
	for _, e := range j.errs {
		checks = append(checks, e.check)
	}
	if strings.Join(checks, ",") != "bmc-fan-health,bmc-event-log" || len(j.notJudged) != 1 || !strings.HasPrefix(j.notJudged[0], "PSUs: not supported") {
		t.Errorf("default bars on unreadable evidence: errors %+v, not judged %v", j.errs, j.notJudged)
	}
	eff, explicit := (&manifests.BMCBars{PowerSupplies: "ok"}).Effective()
	j = judgeBMC("r1", eff, explicit, bad, nil, now)
	if len(j.errs) != 3 || !strings.Contains(j.errs[0].msg, "PSUs unreadable under the bar powerSupplies") {
		t.Errorf("a bar the suite set on a resource the BMC lacks: %+v", j.errs)
	}
	// A BMC that reads no health at all, default bars: nothing judged.
	none := &curev1.BmcEvidence{Collection: &curev1.BmcCollection{Notes: []*curev1.BmcNote{{Resource: "bmc", Message: "reads no health resources", Unsupported: true}}}}
	if j = judgeBMC("r1", manifests.DefaultBMCBars(), nil, none, nil, now); len(j.errs) != 0 || len(j.fails) != 0 || len(j.notJudged) != 3 {
		t.Errorf("no health resources: %+v", j)
	}
}
