package pipeline

import (
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

// An at-least gate over a version it cannot read is an ERROR naming the
// value, not a DRIFT the coordinator would try to fix forever.
func TestPlanOOBUnorderableIsError(t *testing.T) {
	want := []manifests.Firmware{{Name: "bmc", Component: "bmc", Gate: manifests.GateAtLeast, Version: "2.50", Match: manifests.Match{RedfishID: "*"}}}
	for _, tc := range []struct {
		running, status string
		deltas          int
	}{
		{"2.55 Oct 01 2021", "MATCH", 0},
		{"2.45 Oct 01 2020", "DRIFT", 1},
		{"Not Present", "ERROR", 0},
	} {
		rows, deltas := planOOB("bmc", want, []redfish.FirmwareItem{{ID: "BMC", Version: tc.running}})
		if len(rows) != 1 || rows[0].status != tc.status || len(deltas) != tc.deltas {
			t.Fatalf("running %q: rows %+v, %d deltas; want one %s row and %d deltas", tc.running, rows, len(deltas), tc.status, tc.deltas)
		}
		if tc.status == "ERROR" && !strings.Contains(rows[0].msg, tc.running) {
			t.Errorf("ERROR message %q does not name the value %q", rows[0].msg, tc.running)
		}
	}
}
