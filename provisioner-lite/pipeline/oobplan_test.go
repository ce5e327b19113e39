package pipeline

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

// An at-least gate over a version it cannot read is an ERROR naming the
// value, not a DRIFT the coordinator would try to fix forever.
func TestPlanOOBUnorderableIsError(t *testing.T) {
	want := []manifests.Firmware{{Name: "bmc", Component: "bmc", Gate: manifests.GateAtLeast, Version: "2.50", Match: manifests.Match{RedfishID: "*"}}}
	for _, tc := range []struct {
		running string
		status  curev1.VerdictStatus
		deltas  int
	}{
		{"2.55 Oct 01 2021", curev1.VerdictStatus_MATCH, 0},
		{"2.45 Oct 01 2020", curev1.VerdictStatus_DRIFT, 1},
		{"Not Present", curev1.VerdictStatus_ERROR, 0},
	} {
		rows, deltas := planOOB("bmc", want, []redfish.FirmwareItem{{ID: "BMC", Version: tc.running}})
		if len(rows) != 1 || rows[0].status != tc.status || len(deltas) != tc.deltas {
			t.Fatalf("running %q: rows %+v, %d deltas; want one %s row and %d deltas", tc.running, rows, len(deltas), tc.status, tc.deltas)
		}
		if tc.status == curev1.VerdictStatus_ERROR && !strings.Contains(rows[0].msg, tc.running) {
			t.Errorf("ERROR message %q does not name the value %q", rows[0].msg, tc.running)
		}
	}
}

func TestMatchMember(t *testing.T) {
	yes, no := true, false
	idrac := redfish.FirmwareItem{ID: "Installed-25227-6.10.30.00__iDRAC.Embedded.1-1", Name: "Integrated Dell Remote Access Controller", Version: "6.10.30.00", Updateable: true}
	prev := redfish.FirmwareItem{ID: "Previous-25227-6.00.02.00__iDRAC.Embedded.1-1", Name: "Integrated Dell Remote Access Controller", Version: "6.00.02.00", Updateable: true}
	pos := redfish.FirmwareItem{ID: "1", Name: "BMC", SoftwareID: "0x0A", RelatedItems: []string{"/redfish/v1/Managers/1"}, Updateable: true}
	for _, tc := range []struct {
		m    manifests.Match
		it   redfish.FirmwareItem
		want bool
	}{
		{manifests.Match{RedfishID: "*iDRAC*"}, idrac, true},
		{manifests.Match{RedfishID: "*iDRAC*"}, prev, false}, // stale entry: not running
		{manifests.Match{RedfishID: "Previous-*"}, prev, true},
		{manifests.Match{Name: "Integrated Dell Remote Access Controller"}, idrac, true},
		{manifests.Match{Name: "Integrated Dell*", Updateable: &no}, idrac, false},
		{manifests.Match{Name: "BMC", RelatedItem: "/redfish/v1/Managers/*"}, pos, true},
		{manifests.Match{Name: "BMC", RelatedItem: "/redfish/v1/Systems/*"}, pos, false},
		{manifests.Match{SoftwareID: "0x0A", Updateable: &yes}, pos, true},
		{manifests.Match{RedfishID: "1", SoftwareID: "0x0B"}, pos, false},
	} {
		if got := MatchMember(tc.m, tc.it); got != tc.want {
			t.Errorf("MatchMember(%s, %s) = %v, want %v", describeMatch(tc.m), tc.it.ID, got, tc.want)
		}
	}
}

// After an update that renames the member (the Id carries the version), the
// verification finds it through the matcher; a vanished member is never
// counted as success.
func TestVerifyMembersRenamed(t *testing.T) {
	fw := manifests.Firmware{Name: "idrac", Match: manifests.Match{Name: "Integrated Dell Remote Access Controller"}}
	oldID := "Installed-25227-6.00.02.00__iDRAC.Embedded.1-1"
	after := []redfish.FirmwareItem{
		{ID: "Installed-25227-6.10.30.00__iDRAC.Embedded.1-1", Name: fw.Match.Name, Version: "6.10.30.00"},
		{ID: "Previous-25227-6.00.02.00__iDRAC.Embedded.1-1", Name: fw.Match.Name, Version: "6.00.02.00"},
	}
	got := verifyMembers(after, fw, []string{oldID})
	if len(got) != 1 || got[0].Version != "6.10.30.00" {
		t.Fatalf("verifyMembers = %+v, want the renamed running member only", got)
	}
	if got := verifyMembers(after[1:], fw, []string{oldID}); len(got) != 0 {
		t.Fatalf("verifyMembers with only the stale entry = %+v, want none", got)
	}
}

// A literal selector matching several members is ambiguous: ERROR, no delta.
// A wildcard means all of them.
func TestPlanOOBAmbiguousLiteral(t *testing.T) {
	inv := []redfish.FirmwareItem{
		{ID: "BMC_Firmware", Name: "Software Inventory", Version: "BF-24.10-17", Updateable: true},
		{ID: "DPU_UEFI", Name: "Software Inventory", Version: "4.9.0", Updateable: true},
	}
	fw := manifests.Firmware{Name: "bmc", Version: "BF-24.10-20", Match: manifests.Match{Name: "Software Inventory"}}
	rows, deltas := planOOB("bmc", []manifests.Firmware{fw}, inv)
	if len(rows) != 1 || rows[0].status != curev1.VerdictStatus_ERROR || !strings.Contains(rows[0].msg, "BMC_Firmware, DPU_UEFI") || len(deltas) != 0 {
		t.Fatalf("literal Name over two members: rows %+v, deltas %d", rows, len(deltas))
	}
	fw.Match = manifests.Match{Name: "Software Inventory", RedfishID: "BMC_*"}
	if rows, deltas := planOOB("bmc", []manifests.Firmware{fw}, inv); len(rows) != 1 || rows[0].status != curev1.VerdictStatus_DRIFT || len(deltas) != 1 {
		t.Fatalf("Name plus Id glob: rows %+v, deltas %d", rows, len(deltas))
	}
}
