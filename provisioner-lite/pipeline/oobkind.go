package pipeline

import (
	"fmt"
	"path"
	"slices"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

// oobKind is the coordinator's firmware kind of the one planner
// (manifests/fwplan): the FirmwareInventory members of one component
// (bmc, bios or hgx), selected by the manifest's Redfish fields and judged
// through fwplan.Gate like every in-band kind. Every member of the whole
// inventory is offered to each component's entries, so members no entry
// selects are not reported (they belong to no component until an entry
// names them). Pure: the inventory is read before, updates are applied
// after (oob.go).
type oobKind struct{ component string }

// OOBKind is the kind of component (bmc, bios or hgx), for tests that
// hold the coordinator's kinds and the runner's to the same planner.
func OOBKind(component string) fwplan.Component[redfish.FirmwareItem] { return oobKind{component} }

func (k oobKind) Kind() string { return k.component }

// Label is "bmc" and "bios" (one of each per node), "hgx/<Id>" (a tray).
func (k oobKind) Label(it redfish.FirmwareItem) string {
	if k.component == manifests.ComponentBMC || k.component == manifests.ComponentBIOS {
		return k.component
	}
	return k.component + "/" + it.ID
}

// Broken is never set: a member the BMC lists is observed; a version it
// cannot be judged by is the gate's ERROR.
func (oobKind) Broken(redfish.FirmwareItem) string { return "" }

func (oobKind) Match(m manifests.Match, it redfish.FirmwareItem) (bool, string, error) {
	ok, err := MatchMember(m, it)
	return ok, "", err
}

func (oobKind) Judge(fw *manifests.Firmware, it redfish.FirmwareItem) fwplan.Judgement {
	j := fwplan.Gate(fw, it.Version)
	j.Message = fmt.Sprintf("%s: %s: %s", fw.Name, it.ID, j.Message)
	return j
}

func (oobKind) NoMatch(fw *manifests.Firmware, _ []redfish.FirmwareItem) string {
	return fmt.Sprintf("%s: no FirmwareInventory member matches %s", fw.Name, fw.Match)
}

func (oobKind) Unmatched(redfish.FirmwareItem) (fwplan.Judgement, bool) {
	return fwplan.Judgement{}, false
}

// Ambiguous: a selector without a wildcard names one component; several
// members (OpenBMC names every member "Software Inventory") make the
// target ambiguous, and flashing is refused.
func (oobKind) Ambiguous(fw *manifests.Firmware, matched []redfish.FirmwareItem) string {
	if matchHasGlob(fw.Match) {
		return ""
	}
	var ids []string
	for _, it := range matched {
		ids = append(ids, it.ID)
	}
	return fmt.Sprintf("%s: %s names one component but matches %d FirmwareInventory members (%s); add redfishId, softwareId or relatedItem, or use a wildcard to mean all of them",
		fw.Name, fw.Match, len(matched), strings.Join(ids, ", "))
}

// MatchMember reports whether inventory member it is one m selects: every
// field set must match (globs; RelatedItem against any link); a malformed
// glob is an error naming the field. Members that are not the running
// firmware by the vendor's Id convention (Dell's "Previous-…" and
// "Available-…" beside "Installed-…") are left out unless the redfishId
// glob names that prefix itself: a wide glob must not select a stale entry.
func MatchMember(m manifests.Match, it redfish.FirmwareItem) (bool, error) {
	fields := []struct{ name, pat string }{{"redfishId", m.RedfishID}, {"name", m.Name}, {"softwareId", m.SoftwareID}, {"relatedItem", m.RelatedItem}}
	for _, f := range fields {
		// path.Match checks the whole pattern whatever the string.
		if _, err := path.Match(f.pat, ""); err != nil {
			return false, fmt.Errorf("match.%s %q: %w", f.name, f.pat, err)
		}
	}
	glob := func(pat, s string) bool {
		ok, _ := path.Match(pat, s)
		return pat == "" || ok
	}
	if !glob(m.RedfishID, it.ID) || !glob(m.Name, it.Name) || !glob(m.SoftwareID, it.SoftwareID) {
		return false, nil
	}
	if m.Updateable != nil && *m.Updateable != it.Updateable {
		return false, nil
	}
	if m.RelatedItem != "" && !slices.ContainsFunc(it.RelatedItems, func(r string) bool { return glob(m.RelatedItem, r) }) {
		return false, nil
	}
	for _, stale := range []string{"Previous-", "Available-"} {
		if strings.HasPrefix(it.ID, stale) && !strings.HasPrefix(m.RedfishID, stale) {
			return false, nil
		}
	}
	return true, nil
}

// matchHasGlob reports whether any of a redfish selector's fields is a
// pattern rather than a literal.
func matchHasGlob(m manifests.Match) bool {
	for _, f := range []string{m.RedfishID, m.Name, m.SoftwareID, m.RelatedItem} {
		if strings.ContainsAny(f, "*?[\\") {
			return true
		}
	}
	return false
}

// oobRow is one verdict of an out-of-band firmware check.
type oobRow struct {
	component               string
	status                  curev1.VerdictStatus
	observed, expected, msg string
}

// oobDelta is one manifest entry whose inventory members drifted.
type oobDelta struct {
	fw      manifests.Firmware
	targets []redfish.FirmwareItem
}

// planOOB is the plan of one component: fwplan.Plan over the inventory,
// as verdict rows, and the deltas to apply (the drifted members of each
// entry, in manifest order). Pure: no BMC access.
func planOOB(component string, want []manifests.Firmware, inv []redfish.FirmwareItem) (rows []oobRow, deltas []oobDelta) {
	k := oobKind{component}
	var last *manifests.Firmware
	for _, c := range fwplan.Plan[redfish.FirmwareItem](k, want, inv) {
		row := oobRow{component: c.Component(k), status: c.Status, observed: c.Observed, msg: c.Message}
		if c.Entry != nil {
			row.expected = fwplan.Expected(c.Entry)
		}
		rows = append(rows, row)
		if c.Status != curev1.VerdictStatus_DRIFT || !c.HasDevice {
			continue
		}
		if c.Entry != last {
			deltas = append(deltas, oobDelta{fw: *c.Entry})
			last = c.Entry
		}
		deltas[len(deltas)-1].targets = append(deltas[len(deltas)-1].targets, c.Device)
	}
	return rows, deltas
}

// verifyMembers picks the inventory members to verify after an update: the
// flashed targets by Id, or, when any of those Ids is gone (vendors whose
// Ids carry the version rename the member), every member the manifest
// entry's matcher selects now.
func verifyMembers(inv []redfish.FirmwareItem, fw manifests.Firmware, targets []string) []redfish.FirmwareItem {
	var byID []redfish.FirmwareItem
	for _, it := range inv {
		if slices.Contains(targets, it.ID) {
			byID = append(byID, it)
		}
	}
	if len(byID) == len(targets) {
		return byID
	}
	var matched []redfish.FirmwareItem
	for _, it := range inv {
		// The selector planned the update: it is well-formed.
		if ok, _ := MatchMember(fw.Match, it); ok {
			matched = append(matched, it)
		}
	}
	return matched
}

// stagedState says whether the targets already run fw's version (done)
// or hold it staged for the next activation (pending), judged by
// fwplan.Gate: a running or staged version the gate cannot order is an
// error naming the value, not "not done". No member is neither.
func stagedState(fw *manifests.Firmware, members []redfish.FirmwareItem) (done, pending bool, err error) {
	if len(members) == 0 {
		return false, false, nil // nothing to look at is not "done"
	}
	done, pending = true, true
	for _, it := range members {
		j := fwplan.Gate(fw, it.Version)
		if j.Status == curev1.VerdictStatus_ERROR {
			return false, false, fmt.Errorf("%s runs %q: %s", it.ID, it.Version, j.Message)
		}
		done = done && j.Status == curev1.VerdictStatus_MATCH
		if it.PendingVersion == "" { // nothing staged
			pending = false
			continue
		}
		p := fwplan.Gate(fw, it.PendingVersion)
		if p.Status == curev1.VerdictStatus_ERROR {
			return false, false, fmt.Errorf("%s has %q staged: %s", it.ID, it.PendingVersion, p.Message)
		}
		pending = pending && p.Status == curev1.VerdictStatus_MATCH
	}
	return done, pending && !done, nil
}

// confirmOOB judges the members after activation, each through
// fwplan.Confirm: PASS, FAIL (the update did not take) or ERROR (a version
// the gate cannot order, named). bad says what is wrong, "" when nothing;
// fewer members than were flashed is never "0 updated, success".
func confirmOOB(component string, fw *manifests.Firmware, inv []redfish.FirmwareItem, targets []string) (rows []oobRow, bad []string) {
	k := oobKind{component}
	members := verifyMembers(inv, *fw, targets)
	if len(members) < len(targets) {
		bad = append(bad, fmt.Sprintf("%d of %d updated members found in the inventory after activation (targets %s; matcher %s)",
			len(members), len(targets), strings.Join(targets, ", "), fw.Match))
	}
	activation := fw.Activation
	if activation == "" {
		activation = "activation"
	}
	for _, it := range members {
		status, msg := ConfirmVerdict(*fw, it.Version)
		row := oobRow{component: k.Label(it), status: status, observed: it.Version, expected: fwplan.Expected(fw)}
		switch status {
		case curev1.VerdictStatus_PASS:
			row.msg = fmt.Sprintf("%s: %s after %s", fw.Name, msg, activation)
		case curev1.VerdictStatus_FAIL:
			row.msg = fmt.Sprintf("%s: %s after %s (pending %q)", fw.Name, msg, activation, it.PendingVersion)
			bad = append(bad, fmt.Sprintf("%s still runs %s", it.ID, it.Version))
		case curev1.VerdictStatus_ERROR, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_SKIP,
			curev1.VerdictStatus_MARGINAL, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
			// Confirm answers PASS, FAIL or ERROR: anything else is an error too.
			row.msg = fmt.Sprintf("%s: %s: %s", fw.Name, it.ID, msg)
			bad = append(bad, row.msg)
		default:
			row.msg = fmt.Sprintf("%s: %s: %s", fw.Name, it.ID, msg)
			bad = append(bad, row.msg)
		}
		rows = append(rows, row)
	}
	return rows, bad
}
