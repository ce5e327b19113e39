package fwplan

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
)

func TestGateAndConfirm(t *testing.T) {
	atLeast := &manifests.Firmware{Name: "bmc", Version: "2.50", Gate: manifests.GateAtLeast}
	equal := &manifests.Firmware{Name: "nic", Version: "28.39.1002", Gate: manifests.GateEqual}
	for _, tc := range []struct {
		fw              *manifests.Firmware
		running         string
		gate, confirm   curev1.VerdictStatus
		gateMsg, conMsg string
	}{
		{atLeast, "2.55 Oct 01 2021", curev1.VerdictStatus_MATCH, curev1.VerdictStatus_PASS, "is at least 2.50", "updated and verified"},
		{atLeast, "2.45", curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_FAIL, "is older than 2.50", "update did not take"},
		{atLeast, "Not Present", curev1.VerdictStatus_ERROR, curev1.VerdictStatus_ERROR, `invalid version "Not Present"`, `running version "Not Present" cannot be judged`},
		{equal, "28.39.1002", curev1.VerdictStatus_MATCH, curev1.VerdictStatus_PASS, "equals desired", "updated and verified"},
		{equal, "28.39.998", curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_FAIL, "desired 28.39.1002", "update did not take"},
		// Under equal an unreadable value is merely not equal before an
		// update; after one it is an ERROR naming the value.
		{equal, "N/A", curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_ERROR, "running N/A", `running version "N/A" cannot be judged`},
	} {
		g := Gate(tc.fw, tc.running)
		if g.Status != tc.gate || g.Observed != tc.running || !strings.Contains(g.Message, tc.gateMsg) {
			t.Errorf("Gate(%s %s, %q) = %+v; want %v saying %q", tc.fw.Gate, tc.fw.Version, tc.running, g, tc.gate, tc.gateMsg)
		}
		c := Confirm(tc.fw, tc.running)
		if c.Status != tc.confirm || c.Observed != tc.running || !strings.Contains(c.Message, tc.conMsg) {
			t.Errorf("Confirm(%s %s, %q) = %+v; want %v saying %q", tc.fw.Gate, tc.fw.Version, tc.running, c, tc.confirm, tc.conMsg)
		}
	}
	if Expected(atLeast) != ">= 2.50" || Expected(equal) != "28.39.1002" {
		t.Errorf("Expected = %q, %q", Expected(atLeast), Expected(equal))
	}
}
