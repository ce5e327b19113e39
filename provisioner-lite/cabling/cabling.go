// Package cabling judges a node's cabling: what each of its ports heard
// over LLDP (the runner's inventory: facts, never a verdict of the
// runner's) against the site's cabling map (the nodes file's `cabling:`).
// Pure: the session handler calls Judge on a boot's first Hello and keeps
// the verdicts with the run.
package cabling

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Check is the verdicts' check name; their component is nic/<port>.
const Check = "cabling"

// NoneSeen is a verdict's observed value for a port that heard nothing.
const NoneSeen = "none seen"

// maxField bounds what a verdict quotes from a switch's announcement.
const maxField = 128

// Judge gives one verdict per port the plan names: PASS when the port
// heard the planned switch and switch port, FAIL naming the expected and
// the seen neighbour otherwise ("none seen" when it heard nothing within
// the window, or had no link, or the node has no such port). A boot whose
// runner did not listen at all gets ERROR for each: it cannot be judged.
// No plan: no verdict, only the facts the inventory carries.
func Judge(plan map[string]store.Cable, inv *curev1.Inventory) []*curev1.Verdict {
	if len(plan) == 0 {
		return nil
	}
	nics := map[string]*curev1.NetInterface{}
	listened := false
	for _, n := range inv.GetNics() {
		nics[n.GetName()] = n
		listened = listened || n.GetLldpListened()
	}
	window := time.Duration(inv.GetLldpWindowMs()) * time.Millisecond
	var out []*curev1.Verdict
	for _, port := range slices.SortedFunc(maps.Keys(plan), cmp.Compare[string]) {
		want := plan[port]
		v := &curev1.Verdict{Component: "nic/" + port, Check: Check, Expected: Describe(want)}
		nic, ok := nics[port]
		switch {
		case !listened && inv.GetLldpWindowMs() == 0:
			v.Status, v.Observed = curev1.VerdictStatus_ERROR, NoneSeen
			v.Message = "the runner did not listen for LLDP (an image without it, or cure.lldp=0): the cabling cannot be judged"
		case !ok:
			v.Status, v.Observed = curev1.VerdictStatus_FAIL, NoneSeen
			v.Message = fmt.Sprintf("port %s: none seen: the node has no such port (the cabling map expects %s)", port, v.Expected)
		case !nic.GetLldpListened():
			v.Status, v.Observed = curev1.VerdictStatus_FAIL, NoneSeen
			v.Message = fmt.Sprintf("port %s: none seen: no link (the cabling map expects %s)", port, v.Expected)
		case nic.GetLldp() == nil:
			v.Status, v.Observed = curev1.VerdictStatus_FAIL, NoneSeen
			v.Message = fmt.Sprintf("port %s: none seen within %s (the cabling map expects %s)", port, window.Round(time.Millisecond), v.Expected)
		default:
			seen := nic.GetLldp()
			v.Observed = Seen(seen)
			if Matches(want, seen) {
				v.Status = curev1.VerdictStatus_PASS
				v.Message = fmt.Sprintf("port %s is cabled as planned: %s", port, v.Observed)
			} else {
				v.Status = curev1.VerdictStatus_FAIL
				v.Message = fmt.Sprintf("port %s: expected %s, seen %s", port, v.Expected, v.Observed)
			}
		}
		out = append(out, v)
	}
	return out
}

// Matches says whether a neighbour is the planned one: the switch by its
// system name (any case; a domain after it matches) and by its chassis ID
// where the plan gives them, and the port by its port ID or description.
func Matches(want store.Cable, seen *curev1.LLDPNeighbour) bool {
	if want.Switch != "" {
		name := seen.GetSystemName()
		if !strings.EqualFold(name, want.Switch) && !hasPrefixFold(name, want.Switch+".") {
			return false
		}
	}
	if want.Chassis != "" && !strings.EqualFold(want.Chassis, seen.GetChassisId()) {
		return false
	}
	return strings.EqualFold(want.Port, seen.GetPortId()) || strings.EqualFold(want.Port, seen.GetPortDescription())
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// Describe is a planned cable as verdicts and reports show it.
func Describe(c store.Cable) string {
	var sw string
	switch {
	case c.Switch != "" && c.Chassis != "":
		sw = fmt.Sprintf("%s (chassis %s)", c.Switch, c.Chassis)
	case c.Switch != "":
		sw = c.Switch
	default:
		sw = "chassis " + c.Chassis
	}
	return textsafe.BoundedLine(sw+" port "+c.Port, 3*maxField)
}

// Seen is a neighbour as verdicts and reports show it: the switch's name
// (its chassis ID when it sent none, in brackets when it did), its port
// ID, and the port's description when it says something else.
func Seen(n *curev1.LLDPNeighbour) string {
	if n == nil {
		return NoneSeen
	}
	b := func(s string) string { return textsafe.BoundedLine(s, maxField) }
	s := b(n.GetSystemName())
	switch {
	case s == "":
		s = "chassis " + b(n.GetChassisId())
	case n.GetChassisId() != "":
		s += " (chassis " + b(n.GetChassisId()) + ")"
	}
	s += " port " + b(n.GetPortId())
	if d := n.GetPortDescription(); d != "" && !strings.EqualFold(d, n.GetPortId()) {
		s += " (" + b(d) + ")"
	}
	return s
}
