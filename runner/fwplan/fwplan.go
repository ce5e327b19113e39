// Package fwplan is the one firmware planner of the runner: which manifest
// entry judges which device, for any kind of device (NVMe controllers, NICs,
// DPUs, the next one). It is pure: the devices are observed before, and
// updates are done after, by the caller (runner/phases).
//
// The rules, the same for every kind:
//   - a device that could not be observed is an ERROR and no entry takes it;
//   - entries are tried in manifest order, and the first entry that matches
//     a device takes it: that device is judged (MATCH, DRIFT or ERROR) by it;
//   - an entry whose selector is malformed is one ERROR, and it takes no
//     further devices;
//   - a selector the host cannot decide (it needs a value that is not
//     readable) is an ERROR for that device, which the entry takes;
//   - an entry that matches nothing is an ERROR naming its selector;
//   - a device no entry takes is a SKIP (when the kind reports those).
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
	// Judge compares a matched device with its entry.
	Judge(fw *manifests.Firmware, d D) Judgement
	// NoMatch is the message of an entry that matches no device.
	NoMatch(fw *manifests.Firmware, devs []D) string
	// Unmatched is the SKIP of a device no entry selects; report false:
	// such devices are not reported at all.
	Unmatched(d D) (j Judgement, report bool)
}

// Judgement is a verdict on one device or entry.
type Judgement struct {
	Status   curev1.VerdictStatus // MATCH, DRIFT, ERROR or SKIP
	Observed string               // the running version, "" when not read
	Message  string
}

// Check is the plan for one device, or for an entry that concerns none.
type Check[D any] struct {
	// Entry is nil for a device no entry selects (SKIP) or one that could
	// not be observed (ERROR).
	Entry *manifests.Firmware
	// Device is valid when HasDevice: an entry that matches nothing, or
	// whose selector is malformed, concerns no device.
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
	for k := range entries {
		fw := &entries[k]
		n := 0
		for i, d := range devs {
			if taken[i] {
				continue
			}
			ok, undecided, err := c.Match(fw.Match, d)
			if err != nil {
				out = append(out, Check[D]{Entry: fw, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR,
					Message: fmt.Sprintf("firmware entry %q: %v", fw.Name, err)}})
				n = -1
				break
			}
			if undecided != "" {
				taken[i] = true
				n++
				out = append(out, Check[D]{Entry: fw, Device: d, HasDevice: true, Judgement: Judgement{Status: curev1.VerdictStatus_ERROR,
					Message: fmt.Sprintf("firmware entry %q on %s", fw.Name, undecided)}})
				continue
			}
			if !ok {
				continue
			}
			taken[i] = true
			n++
			out = append(out, Check[D]{Entry: fw, Device: d, HasDevice: true, Judgement: c.Judge(fw, d)})
		}
		if n == 0 {
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
