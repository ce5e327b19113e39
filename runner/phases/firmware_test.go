package phases

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/agent"
)

// toyDev is a device of toyKind: a name and its running version.
type toyDev struct{ name, version string }

// toyKind is a firmware kind with fixed entries and devices; every entry
// matches every device (so the first entry takes all) unless its model
// names one device. update records the call and answers per device.
type toyKind struct {
	fws     []manifests.Firmware
	devs    []toyDev
	end     *agent.PhaseOutcome
	fail    map[string]bool // update FAILs on these devices
	reboot  map[string]bool // update needs a reboot on these
	updated []string
}

func (*toyKind) Kind() string           { return "toy" }
func (*toyKind) Label(d toyDev) string  { return "toy/" + d.name }
func (*toyKind) Broken(d toyDev) string { return "" }
func (*toyKind) Match(m manifests.Match, d toyDev) (bool, string, error) {
	return m.Model == "" || m.Model == d.name, "", nil
}
func (*toyKind) Judge(fw *manifests.Firmware, d toyDev) fwplan.Judgement {
	j := fwplan.Gate(fw, d.version)
	j.Message = d.name + ": " + j.Message
	return j
}
func (*toyKind) NoMatch(fw *manifests.Firmware, _ []toyDev) string {
	return fmt.Sprintf("firmware entry %q: no toy matches", fw.Name)
}
func (*toyKind) Unmatched(d toyDev) (fwplan.Judgement, bool) {
	return fwplan.Judgement{Observed: d.version, Message: d.name + ": unselected"}, true
}
func (*toyKind) words() fwWords {
	return fwWords{devices: "toy(s)", pinned: "pinned ", action: "update", kind: "toy update", done: "updated"}
}
func (k *toyKind) entries(*manifests.SKU) ([]manifests.Firmware, string) {
	return k.fws, "no toy entries"
}
func (k *toyKind) observe(context.Context, []manifests.Firmware, agent.Emitter) ([]toyDev, *agent.PhaseOutcome) {
	return k.devs, k.end
}
func (k *toyKind) update(_ context.Context, a *curev1.Assignment, c fwplan.Check[toyDev], _ agent.Emitter) (*curev1.Verdict, bool) {
	k.updated = append(k.updated, c.Device.name)
	v := &curev1.Verdict{Component: k.Label(c.Device), Check: "firmware_update", Status: curev1.VerdictStatus_PASS, Message: "flashed"}
	if k.fail[c.Device.name] {
		v.Status, v.Message = curev1.VerdictStatus_FAIL, "flash refused"
	}
	return v, k.reboot[c.Device.name]
}

func toyEntry(name, model, version string) manifests.Firmware {
	return manifests.Firmware{Name: name, Component: "toy", Version: version, Gate: manifests.GateEqual, Match: manifests.Match{Model: model},
		Artifact: &manifests.Artifact{SHA256: strings.Repeat("ab", 32), Size: 1}}
}

// noImage is an entry without an artifact.
func noImage(fw manifests.Firmware) manifests.Firmware {
	fw.Artifact = nil
	return fw
}

func TestRunFirmware(t *testing.T) {
	e := New(Config{Log: quiet()})
	stop := skipped("nothing here")
	for _, tc := range []struct {
		name    string
		mode    curev1.Mode
		k       toyKind
		status  curev1.PhaseStatus
		reboot  bool
		msg     string   // the phase message, exactly
		updated []string // devices update was called for
		verdict string   // component=status of the firmware verdicts, in order
	}{
		{name: "no entries", mode: curev1.Mode_MODE_PROVISION, k: toyKind{devs: []toyDev{{"a", "1"}}},
			status: curev1.PhaseStatus_PHASE_SKIPPED, msg: "no toy entries"},
		{name: "observe ends the phase", mode: curev1.Mode_MODE_PROVISION, k: toyKind{fws: []manifests.Firmware{toyEntry("e", "", "1")}, end: &stop},
			status: curev1.PhaseStatus_PHASE_SKIPPED, msg: "nothing here"},
		{name: "all match", mode: curev1.Mode_MODE_PROVISION,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "a", "1")}, devs: []toyDev{{"a", "1"}, {"b", "9"}}},
			status: curev1.PhaseStatus_PHASE_SKIPPED, msg: "all 1 pinned toy(s) match the manifest: nothing to update",
			verdict: "toy/a=MATCH toy/b=SKIP"},
		{name: "provision updates drift", mode: curev1.Mode_MODE_PROVISION,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2")}, devs: []toyDev{{"a", "1"}, {"b", "2"}, {"c", "1"}}, reboot: map[string]bool{"c": true}},
			status: curev1.PhaseStatus_PHASE_OK, reboot: true, msg: "updated toy/a, toy/c (at next reboot)", updated: []string{"a", "c"},
			verdict: "toy/a=DRIFT toy/b=MATCH toy/c=DRIFT"},
		{name: "a failed update fails the phase", mode: curev1.Mode_MODE_PROVISION,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2")}, devs: []toyDev{{"a", "1"}, {"b", "1"}}, fail: map[string]bool{"a": true}, reboot: map[string]bool{"b": true}},
			status: curev1.PhaseStatus_PHASE_FAILED, msg: "toy update failed: toy/a: flash refused", updated: []string{"a", "b"},
			verdict: "toy/a=DRIFT toy/b=DRIFT"},
		{name: "a drifted entry without an image fails, the kind is not asked", mode: curev1.Mode_MODE_PROVISION,
			k:      toyKind{fws: []manifests.Firmware{noImage(toyEntry("e", "a", "2")), toyEntry("f", "b", "2")}, devs: []toyDev{{"a", "1"}, {"b", "1"}}},
			status: curev1.PhaseStatus_PHASE_FAILED, msg: `toy update failed: toy/a: firmware entry "e" drifted but names no artifact`, updated: []string{"b"},
			verdict: "toy/a=DRIFT toy/b=DRIFT"},
		{name: "provision error fails before any update", mode: curev1.Mode_MODE_PROVISION,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2"), toyEntry("ghost", "zz", "2")}, devs: []toyDev{{"a", "1"}}},
			status: curev1.PhaseStatus_PHASE_FAILED, msg: `toy: firmware entry "ghost": no toy matches`,
			verdict: "toy/a=DRIFT toy=ERROR"},
		{name: "service updates drift like provision", mode: curev1.Mode_MODE_SERVICE,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2")}, devs: []toyDev{{"a", "1"}, {"b", "2"}}},
			status: curev1.PhaseStatus_PHASE_OK, msg: "updated toy/a", updated: []string{"a"},
			verdict: "toy/a=DRIFT toy/b=MATCH"},
		{name: "audit reports drift only", mode: curev1.Mode_MODE_AUDIT,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2")}, devs: []toyDev{{"a", "1"}, {"b", "2"}}},
			status: curev1.PhaseStatus_PHASE_OK, msg: "2 toy(s) checked: 1 drift, 0 error (toy/a 1 -> 2; reported only in MODE_AUDIT)",
			verdict: "toy/a=DRIFT toy/b=MATCH"},
		{name: "verify reports errors, never updates", mode: curev1.Mode_MODE_VERIFY,
			k:      toyKind{fws: []manifests.Firmware{toyEntry("e", "", "2"), toyEntry("ghost", "zz", "2")}, devs: []toyDev{{"a", "1"}}},
			status: curev1.PhaseStatus_PHASE_OK, msg: "1 toy(s) checked: 1 drift, 1 error (toy/a 1 -> 2; reported only in MODE_VERIFY)",
			verdict: "toy/a=DRIFT toy=ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			em := &recEmitter{}
			k := tc.k
			out := runFirmware[toyDev](context.Background(), e, &k, assignment(t, tc.mode, manifest(t)), em)
			if out.Status != tc.status || out.RebootRequired != tc.reboot || out.Message != tc.msg {
				t.Errorf("outcome %v reboot=%v %q\nwant    %v reboot=%v %q", out.Status, out.RebootRequired, out.Message, tc.status, tc.reboot, tc.msg)
			}
			if !slices.Equal(k.updated, tc.updated) {
				t.Errorf("updated %v, want %v", k.updated, tc.updated)
			}
			var got []string
			for _, v := range em.verdicts {
				if v.GetCheck() == "firmware" {
					got = append(got, v.GetComponent()+"="+v.GetStatus().String())
				}
			}
			if strings.Join(got, " ") != tc.verdict {
				t.Errorf("verdicts %q, want %q", strings.Join(got, " "), tc.verdict)
			}
		})
	}
}
