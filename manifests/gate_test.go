package manifests

import (
	"strings"
	"testing"
)

func TestSatisfied(t *testing.T) {
	for _, tc := range []struct {
		gate, want, running string
		ok                  bool
		err                 string
	}{
		{GateEqual, "7.2.22", "7.2.22", true, ""},
		{GateEqual, "7.2.22", "07.2.22", true, ""},
		{GateEqual, "7.2.22", "7.2.23", false, ""}, // newer is still drift under equal
		{"", "7.2.22", "7.2.22", true, ""},
		{GateEqual, "1.0", "n/a", false, ""},
		{GateAtLeast, "28.43.2026", "28.43.2026", true, ""},
		{GateAtLeast, "28.43.2026", "28.44.1000", true, ""},
		{GateAtLeast, "28.43.2026", "28.39.1002", false, ""},
		{GateAtLeast, "BF-24.10-17", "BF-24.10-9", false, ""},
		{GateAtLeast, "BF-24.10-17", "P24.11.0", false, "different version families"},
		{GateAtLeast, "28.43.2026", "unknown value", false, "running version"},
		{"newest", "1", "1", false, `unknown gate "newest"`},
	} {
		f := Firmware{Name: "fw", Gate: tc.gate, Version: tc.want}
		ok, err := f.Satisfied(tc.running)
		if ok != tc.ok || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %q vs running %q = %v, %v; want %v, error containing %q", tc.gate, tc.want, tc.running, ok, err, tc.ok, tc.err)
		}
	}
}
