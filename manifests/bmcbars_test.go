package manifests

import (
	"reflect"
	"strings"
	"testing"
)

// TestBMCBars: spec.bmc is read with its defaults filled in (a field left
// out keeps the default; ignore relaxes it), kept through a round trip flat
// and staged, and a suite without it gets DefaultBMCBars.
func TestBMCBars(t *testing.T) {
	for _, body := range []string{
		"spec:\n  bmc:\n    fans: ignore\n    eventLog: Warning\n    sensors:\n      - {match: \"Sensors/CPU*Temp\", max: 95}\n      - {match: \"*/PSU* Input\", min: 180, max: 264}\n  checks: [{name: a, type: cpu}]",
		"spec:\n  bmc: {fans: ignore, eventLog: Warning, sensors: [{match: \"Sensors/CPU*Temp\", max: 95}, {match: \"*/PSU* Input\", min: 180, max: 264}]}\n  stages: [{name: s, checks: [{name: a, type: cpu}]}]",
	} {
		src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\n" + body + "\n"
		s, err := ParseSuite("x.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		eff, explicit := s.Spec.BMC.Effective()
		if eff.PowerSupplies != BMCPartsOK || eff.Fans != BMCIgnore || eff.EventLog != BMCSeverityWarning || len(eff.Sensors) != 2 ||
			*eff.Sensors[0].Max != 95 || eff.Sensors[0].Min != nil || *eff.Sensors[1].Min != 180 {
			t.Errorf("effective bars %+v", eff)
		}
		if explicit["powerSupplies"] || !explicit["fans"] || !explicit["eventLog"] {
			t.Errorf("explicit %v", explicit)
		}
		out, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseSuite("x.yaml", out)
		if err != nil || !reflect.DeepEqual(back.Spec.BMC, s.Spec.BMC) {
			t.Errorf("round trip: %+v, %v\n%s", back.Spec.BMC, err, out)
		}
	}
	s, err := ParseSuite("x.yaml", []byte("apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\nspec: {checks: [{name: a, type: cpu}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if eff, explicit := s.Spec.BMC.Effective(); !reflect.DeepEqual(eff, DefaultBMCBars()) || len(explicit) != 0 {
		t.Errorf("a suite without spec.bmc: %+v %v", eff, explicit)
	}
}

// TestBMCBarsErrors: a bad bar names its file, line and path.
func TestBMCBarsErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"spec:\n  bmc: {powerSupplies: maybe}\n  checks: [{name: a, type: cpu}]", `x.yaml:5: spec.bmc.powerSupplies: "maybe" is not one of ok, ignore`},
		{"spec:\n  bmc: {eventLog: Error}\n  checks: [{name: a, type: cpu}]", `spec.bmc.eventLog: "Error" is not one of Critical, Warning, ignore`},
		{"spec:\n  bmc: {psus: ok}\n  checks: [{name: a, type: cpu}]", "spec.bmc.psus: unknown field"},
		{"spec:\n  bmc:\n    sensors:\n      - {match: \"CPU*\"}\n  checks: [{name: a, type: cpu}]", "x.yaml:7: spec.bmc.sensors[0]: sensor bar sets no limit"},
		{"spec:\n  bmc: {sensors: [{match: \"[\", max: 1}]}\n  checks: [{name: a, type: cpu}]", `spec.bmc.sensors[0].match: "[" is not a valid glob`},
		{"spec:\n  bmc: {sensors: [{match: a, min: 5, max: 1}]}\n  checks: [{name: a, type: cpu}]", "spec.bmc.sensors[0].max: 1 is below min 5"},
		{"spec:\n  bmc: {sensors: [{max: 1}]}\n  checks: [{name: a, type: cpu}]", "spec.bmc.sensors[0].match: required field is missing"},
	} {
		src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\n" + tc.yaml + "\n"
		_, err := ParseSuite("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\nerror = %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}
