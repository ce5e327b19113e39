package fwplan

import (
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/version"
)

// Gate judges a device running version running against its entry, before
// any update: MATCH, DRIFT, or ERROR when the gate cannot order the
// versions (an unparseable value under at-least, two version families, a
// comparison that would be a guess); the error names the value. Every
// kind's Judge goes through it, on both sides.
func Gate(fw *manifests.Firmware, running string) Judgement {
	j := Judgement{Observed: running}
	ok, err := fw.Satisfied(running)
	switch {
	case err != nil:
		j.Status, j.Message = curev1.VerdictStatus_ERROR, err.Error()
	case ok && fw.Gate == manifests.GateAtLeast:
		j.Status, j.Message = curev1.VerdictStatus_MATCH, fmt.Sprintf("running %s is at least %s", running, fw.Version)
	case ok:
		j.Status, j.Message = curev1.VerdictStatus_MATCH, "running version equals desired"
	case fw.Gate == manifests.GateAtLeast:
		j.Status, j.Message = curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s is older than %s", running, fw.Version)
	default:
		j.Status, j.Message = curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s, desired %s", running, fw.Version)
	}
	return j
}

// Confirm judges the version a device runs after an update was applied
// and activated: PASS when it meets the entry, FAIL when it does not (the
// update did not take), ERROR when the gate cannot order it: a version
// the gate cannot read after a flash is not "did not change", and the
// message names the value.
func Confirm(fw *manifests.Firmware, running string) Judgement {
	j := Gate(fw, running)
	if j.Status == curev1.VerdictStatus_DRIFT {
		// Under equal an unreadable value is merely "not equal"; after a
		// flash it says the BMC or tool reports something else than a
		// version, which is not the same as the old one still running.
		if _, err := version.Parse(running); err != nil {
			j.Status, j.Message = curev1.VerdictStatus_ERROR, err.Error()
		}
	}
	switch j.Status {
	case curev1.VerdictStatus_MATCH:
		j.Status, j.Message = curev1.VerdictStatus_PASS, "updated and verified: "+j.Message
	case curev1.VerdictStatus_DRIFT:
		j.Status, j.Message = curev1.VerdictStatus_FAIL, "update did not take: "+j.Message
	case curev1.VerdictStatus_ERROR, curev1.VerdictStatus_SKIP, curev1.VerdictStatus_PASS, curev1.VerdictStatus_FAIL,
		curev1.VerdictStatus_MARGINAL, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		j.Message = fmt.Sprintf("after the update the running version %q cannot be judged: %s", running, j.Message)
	default:
		j.Message = fmt.Sprintf("after the update the running version %q cannot be judged: %s", running, j.Message)
	}
	return j
}

// Expected is a verdict's expected value for fw: the version, or ">= v"
// under at-least.
func Expected(fw *manifests.Firmware) string {
	if fw.Gate == manifests.GateAtLeast {
		return ">= " + fw.Version
	}
	return fw.Version
}
