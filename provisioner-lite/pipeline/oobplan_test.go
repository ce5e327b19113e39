package pipeline

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
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
		if got, err := MatchMember(tc.m, tc.it); got != tc.want || err != nil {
			t.Errorf("MatchMember(%s, %s) = %v, %v; want %v", tc.m, tc.it.ID, got, err, tc.want)
		}
	}
	// A malformed glob is an error naming the field, whatever the member.
	for _, m := range []manifests.Match{{RedfishID: "BMC["}, {Name: "x", RelatedItem: "/redfish/v1/Managers/["}} {
		if ok, err := MatchMember(m, pos); ok || err == nil || !strings.Contains(err.Error(), "match.") {
			t.Errorf("MatchMember(%s) = %v, %v; want an error naming the field", m, ok, err)
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

// The coordinator's rules are the planner's: the first entry that selects
// a member takes it, an entry left with nothing is an ERROR, a malformed
// glob is an ERROR naming the field, and nothing of those is a delta.
func TestPlanOOBFirstEntryTakes(t *testing.T) {
	inv := []redfish.FirmwareItem{
		{ID: "HGX_FW_GPU_SXM_1", Version: "96.00.A5.00.01"},
		{ID: "HGX_FW_GPU_SXM_2", Version: "97.00.0B.00.01"},
	}
	want := []manifests.Firmware{
		{Name: "bad", Version: "1", Match: manifests.Match{Name: "GPU ["}},
		{Name: "gpu1", Version: "97.00.0B.00.01", Match: manifests.Match{RedfishID: "HGX_FW_GPU_SXM_1"}},
		{Name: "gpus", Version: "97.00.0B.00.01", Match: manifests.Match{RedfishID: "HGX_FW_GPU_*"}},
		{Name: "again", Version: "97.00.0B.00.01", Match: manifests.Match{RedfishID: "HGX_FW_GPU_*"}},
	}
	rows, deltas := planOOB("hgx", want, inv)
	var got []string
	for _, r := range rows {
		got = append(got, r.component+"="+runstate.VerdictName(r.status))
	}
	if strings.Join(got, " ") != "hgx=ERROR hgx/HGX_FW_GPU_SXM_1=DRIFT hgx/HGX_FW_GPU_SXM_2=MATCH hgx=ERROR" {
		t.Fatalf("rows %q", got)
	}
	if !strings.Contains(rows[0].msg, `match.name "GPU ["`) || !strings.Contains(rows[3].msg, `again: no FirmwareInventory member matches {redfishId="HGX_FW_GPU_*"}`) {
		t.Errorf("ERROR messages %q, %q", rows[0].msg, rows[3].msg)
	}
	if len(deltas) != 1 || deltas[0].fw.Name != "gpu1" || len(deltas[0].targets) != 1 {
		t.Errorf("deltas %+v", deltas)
	}
}

// After a flash every member is judged by fwplan.Confirm: a version the
// gate cannot order is an ERROR naming the value, never "still runs".
func TestConfirmOOB(t *testing.T) {
	fw := &manifests.Firmware{Name: "bmc", Version: "1.50.0", Gate: manifests.GateAtLeast, Activation: "bmc-reset", Match: manifests.Match{RedfishID: "BMC"}}
	for _, tc := range []struct {
		running, status, msg, bad string
	}{
		{"1.50.1", "PASS", "updated and verified", ""},
		{"1.45.455b66-rev4", "FAIL", "update did not take", "BMC still runs 1.45.455b66-rev4"},
		{"Not Present", "ERROR", `running version "Not Present" cannot be judged`, `"Not Present"`},
		{"BF-1.50.0", "ERROR", "different version families", `"BF-1.50.0"`},
	} {
		rows, bad := confirmOOB("bmc", fw, []redfish.FirmwareItem{{ID: "BMC", Version: tc.running}}, []string{"BMC"})
		if len(rows) != 1 || runstate.VerdictName(rows[0].status) != tc.status || !strings.Contains(rows[0].msg, tc.msg) {
			t.Errorf("running %q: rows %+v; want one %s saying %q", tc.running, rows, tc.status, tc.msg)
		}
		if (tc.bad == "") != (len(bad) == 0) || (tc.bad != "" && !strings.Contains(strings.Join(bad, "; "), tc.bad)) {
			t.Errorf("running %q: bad %q, want %q", tc.running, bad, tc.bad)
		}
	}
	if rows, bad := confirmOOB("bmc", fw, nil, []string{"BMC"}); len(rows) != 0 || len(bad) != 1 || !strings.Contains(bad[0], "0 of 1 updated members") {
		t.Errorf("member gone: %+v %q", rows, bad)
	}
}

// Whether an earlier submission took effect is judged by the gate too: a
// version it cannot order is an error naming it, not "not done".
func TestStagedState(t *testing.T) {
	fw := &manifests.Firmware{Name: "bmc", Version: "1.50.0", Gate: manifests.GateAtLeast}
	for _, tc := range []struct {
		running, pending string
		done, staged     bool
		err              string
	}{
		{"1.50.0", "", true, false, ""},
		{"1.45.0", "1.50.0", false, true, ""},
		{"1.45.0", "", false, false, ""},
		{"Not Present", "", false, false, `BMC runs "Not Present"`},
		{"1.45.0", "N/A", false, false, `BMC has "N/A" staged`},
	} {
		done, staged, err := stagedState(fw, []redfish.FirmwareItem{{ID: "BMC", Version: tc.running, PendingVersion: tc.pending}})
		if done != tc.done || staged != tc.staged || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q/%q: %v %v %v; want %v %v %q", tc.running, tc.pending, done, staged, err, tc.done, tc.staged, tc.err)
		}
	}
	if done, staged, err := stagedState(fw, nil); done || staged || err != nil {
		t.Errorf("no members: %v %v %v", done, staged, err)
	}
}
