// Package fwplan is the one firmware planner of CURE: which manifest entry
// judges which device, for any kind of device. The runner's in-band kinds
// (NVMe controllers, NICs, DPUs) and the coordinator's Redfish kinds (bmc,
// bios, hgx FirmwareInventory members) are all kinds of this planner, so the
// two sides cannot apply different rules. It is pure: the devices are
// observed before, and updates are done after, by the caller.
//
// The rules, the same for every kind:
//   - a device that could not be observed is an ERROR and no entry takes it;
//   - entries are tried in manifest order, and the first entry that matches
//     a device takes it: that device is judged (MATCH, DRIFT or ERROR) by it;
//   - an entry whose selector is malformed is one ERROR, and it takes no
//     further devices;
//   - a selector the host cannot decide (it needs a value that is not
//     readable) is an ERROR for that device, which the entry takes;
//   - a selector the kind says names one device (Ambiguity) but that
//     matches several is one ERROR for the entry, which takes them all, so
//     that no later entry flashes a device the manifest did not single out;
//   - an entry that matches nothing is an ERROR naming its selector;
//   - a device no entry takes is a SKIP (when the kind reports those).
//
// A running version is judged by Gate (before an update) and Confirm (after
// one), both over manifests/version.Satisfies: a version the gate cannot
// order is an ERROR naming the value, never a silent DRIFT or "did not
// change".
package fwplan

import (
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
)

// Component is what the planner needs to know about one kind of device.
type Component[D any] interface {
	// Kind names the kind ("nvme"); it is the verdict component of a
	// check that concerns no device.
	Kind() string
	// Label names one device in verdicts: nvme/1, nic/0000:17:00.0.
	Label(d D) string
	// Broken is the ERROR message of a device that could not be
	// observed ("0000:3b:00.0: -E- Cannot open Device"); "" when it could.
	Broken(d D) string
	// Match applies an entry's selector to an observed device. err: the
	// selector itself is malformed. undecided != "": the selector needs a
	// value the host cannot read on this device; it names the device and
	// the value ("rshim0: match.psid X: cannot read the DPU's PSID").
	Match(m manifests.Match, d D) (ok bool, undecided string, err error)
	// Judge compares a matched device with its entry (through Gate).
	Judge(fw *manifests.Firmware, d D) Judgement
	// NoMatch is the message of an entry that matches no device.
	NoMatch(fw *manifests.Firmware, devs []D) string
	// Unmatched is the SKIP of a device no entry selects; report false:
	// such devices are not reported at all.
	Unmatched(d D) (j Judgement, report bool)
}

// Ambiguity is implemented by kinds where a selector may name exactly one
// device: over Redfish a selector without a wildcard names one component,
// and OpenBMC names every member "Software Inventory". Ambiguous returns
// the ERROR message when entry fw, naming one device, matched several
// (matched, in device order; at least two); "" when that is fine.
type Ambiguity[D any] interface {
	Ambiguous(fw *manifests.Firmware, matched []D) string
}

// Judgement is a verdict on one device or entry.
type Judgement struct {
	Status   curev1.VerdictStatus // MATCH, DRIFT, ERROR or SKIP (PASS, FAIL, ERROR from Confirm)
	Observed string               // the running version, "" when not read
	Message  string
}

// Check is the plan for one device, or for an entry that concerns none.
type Check[D any] struct {
	// Entry is nil for a device no entry selects (SKIP) or one that could
	// not be observed (ERROR).
	Entry *manifests.Firmware
	// Device is valid when HasDevice: an entry that matches nothing, or
	// whose selector is malformed or ambiguous, concerns no device.
	Device    D
	HasDevice bool
	Judgement
}

// Plan judges devs against entries by the rules in the package comment.
// Checks come in a fixed order: broken devices, then each entry's in
// manifest order (its devices in the order given), then unmatched devices.
// Entries are referenced, not copied: Check.Entry points into entries.
func Plan[D any](c Component[D], entries []manifests.Firmware, devs []D) []Check[D] {
	var out []Check[D]
	taken := make([]bool, len(devs))
	for i, d := range devs {
		if msg := c.Broken(d); msg != "" {
			taken[i] = true
			out = append(out, Check[D]{Device: d, HasDevice: true, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR, Message: msg}})
		}
	}
	amb, _ := any(c).(Ambiguity[D])
	for k := range entries {
		fw := &entries[k]
		var mine []Check[D] // this entry's device checks
		var hits []int      // their device indexes
		malformed := ""
		for i, d := range devs {
			if taken[i] {
				continue
			}
			ok, undecided, err := c.Match(fw.Match, d)
			if err != nil {
				malformed = fmt.Sprintf("firmware entry %q: %v", fw.Name, err)
				break
			}
			switch {
			case undecided != "":
				mine = append(mine, Check[D]{Entry: fw, Device: d, HasDevice: true, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR,
					Message: fmt.Sprintf("firmware entry %q on %s", fw.Name, undecided)}})
			case ok:
				mine = append(mine, Check[D]{Entry: fw, Device: d, HasDevice: true, Judgement: c.Judge(fw, d)})
			default:
				continue
			}
			hits = append(hits, i)
		}
		for _, i := range hits {
			taken[i] = true
		}
		if amb != nil && malformed == "" && len(hits) > 1 {
			matched := make([]D, len(hits))
			for j, i := range hits {
				matched[j] = devs[i]
			}
			if msg := amb.Ambiguous(fw, matched); msg != "" {
				out = append(out, Check[D]{Entry: fw, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR, Message: msg}})
				continue
			}
		}
		out = append(out, mine...)
		switch {
		case malformed != "":
			out = append(out, Check[D]{Entry: fw, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR, Message: malformed}})
		case len(hits) == 0:
			out = append(out, Check[D]{Entry: fw, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR, Message: c.NoMatch(fw, devs)}})
		}
	}
	for i, d := range devs {
		if taken[i] {
			continue
		}
		if j, report := c.Unmatched(d); report {
			j.Status = curev1.VerdictStatus_SKIP
			out = append(out, Check[D]{Device: d, HasDevice: true, Judgement: j})
		}
	}
	return out
}

// Component is the verdict component of a check: the device's label, or
// the kind for a check that concerns no device.
func (ch Check[D]) Component(c Component[D]) string {
	if !ch.HasDevice {
		return c.Kind()
	}
	return c.Label(ch.Device)
}
