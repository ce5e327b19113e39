package redfish

import (
	"encoding/json"
	"fmt"
	"slices"
)

// bootState is what the BMC says about its boot override, including the
// vendor-specific allowable values gofish does not parse.
type bootState struct {
	Target         string
	Enabled        string
	Mode           string
	HasMode        bool // the system exposes BootSourceOverrideMode at all
	AllowedTargets []string
	AllowedEnabled []string
	AllowedModes   []string
}

// parseBootState reads the Boot object out of a raw ComputerSystem body.
func parseBootState(raw []byte) (bootState, error) {
	var doc struct {
		Boot map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return bootState{}, fmt.Errorf("parse ComputerSystem body: %w", err)
	}
	if doc.Boot == nil {
		return bootState{}, fmt.Errorf("ComputerSystem has no Boot object: the BMC cannot override boot")
	}
	var st bootState
	str := func(k string, dst *string) {
		if v, ok := doc.Boot[k]; ok {
			_ = json.Unmarshal(v, dst) // null or non-string: leave empty
		}
	}
	list := func(k string, dst *[]string) {
		if v, ok := doc.Boot[k]; ok {
			var l allowList
			_ = json.Unmarshal(v, &l) // never fails: tolerant
			*dst = l
		}
	}
	str("BootSourceOverrideTarget", &st.Target)
	str("BootSourceOverrideEnabled", &st.Enabled)
	str("BootSourceOverrideMode", &st.Mode)
	_, st.HasMode = doc.Boot["BootSourceOverrideMode"]
	list("BootSourceOverrideTarget@Redfish.AllowableValues", &st.AllowedTargets)
	list("BootSourceOverrideEnabled@Redfish.AllowableValues", &st.AllowedEnabled)
	list("BootSourceOverrideMode@Redfish.AllowableValues", &st.AllowedModes)
	return st, nil
}

// bootPatch is the Boot object to PATCH; empty fields are left out.
type bootPatch struct {
	Target  string `json:"BootSourceOverrideTarget,omitempty"`
	Enabled string `json:"BootSourceOverrideEnabled,omitempty"`
	Mode    string `json:"BootSourceOverrideMode,omitempty"`
	// Note explains a deliberate deviation from what was asked (logged).
	Note string `json:"-"`
}

func (p bootPatch) empty() bool { return p.Target == "" && p.Enabled == "" && p.Mode == "" }

// planBootOverride computes the PATCH that makes the BMC boot target next
// (once) or from now on (!once). An empty patch means nothing to change.
func planBootOverride(st bootState, target BootTarget, once bool) (bootPatch, error) {
	if target == "" {
		return bootPatch{}, fmt.Errorf("boot target is empty (want %s or %s)", BootPxe, BootHdd)
	}
	if len(st.AllowedTargets) > 0 && !slices.Contains(st.AllowedTargets, string(target)) {
		return bootPatch{}, fmt.Errorf("%w: boot target %q is not in BootSourceOverrideTarget@Redfish.AllowableValues %v",
			ErrNotSupported, target, st.AllowedTargets)
	}
	want := "Continuous"
	if once {
		want = "Once"
	}
	if target == BootNone {
		want = "Disabled"
	}
	var p bootPatch
	if len(st.AllowedEnabled) > 0 && !slices.Contains(st.AllowedEnabled, want) {
		switch {
		case want == "Continuous" && target == BootHdd && slices.Contains(st.AllowedEnabled, "Disabled"):
			// Lenovo-style BMCs have no Continuous. With the override
			// disabled the persistent boot order applies, and that order
			// is disk first: the state that persists is "Disabled".
			p.Note = fmt.Sprintf("BMC allows BootSourceOverrideEnabled %v (no Continuous): disabling the override so the persistent disk-first boot order applies", st.AllowedEnabled)
			if st.Enabled == "Disabled" {
				return bootPatch{Note: p.Note}, nil
			}
			return bootPatch{Enabled: "Disabled", Note: p.Note}, nil
		case want == "Continuous":
			return bootPatch{}, fmt.Errorf("%w: BMC allows BootSourceOverrideEnabled %v, so %s cannot persist; re-arm a Once override before every boot",
				ErrNotSupported, st.AllowedEnabled, target)
		default:
			return bootPatch{}, fmt.Errorf("%w: BootSourceOverrideEnabled %q is not in the allowable values %v",
				ErrNotSupported, want, st.AllowedEnabled)
		}
	}
	if st.Target == string(target) && st.Enabled == want {
		return bootPatch{}, nil // already so: compare first, act only on a delta
	}
	p.Enabled = want
	if target != BootNone {
		p.Target = string(target)
	}
	// Repeat the current mode when the system has one: some BMCs fall back
	// to Legacy when a PATCH leaves it out.
	if st.HasMode && st.Mode != "" {
		p.Mode = st.Mode
	}
	return p, nil
}

// resetCandidates lists, best first, the ResetType values that carry out
// what the caller asked for.
func resetCandidates(resetType string) []string {
	switch resetType {
	case "On":
		return []string{"On", "ForceOn", "PushPowerButton"}
	case "ForceOn":
		return []string{"ForceOn", "On"}
	case "ForceOff":
		return []string{"ForceOff"}
	case "GracefulShutdown":
		return []string{"GracefulShutdown"}
	case "ForceRestart":
		return []string{"ForceRestart", "PowerCycle", "GracefulRestart"}
	case "GracefulRestart":
		return []string{"GracefulRestart", "ForceRestart", "PowerCycle"}
	case "PowerCycle":
		return []string{"PowerCycle", "ForceRestart", "GracefulRestart"}
	}
	return []string{resetType}
}

// chooseReset picks the first candidate the system allows. With no
// allowable values published the request goes out as asked.
func chooseReset(resetType string, allowed []string) (string, error) {
	if len(allowed) == 0 {
		return resetType, nil
	}
	for _, c := range resetCandidates(resetType) {
		if slices.Contains(allowed, c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: reset %q: none of %v is in ResetType@Redfish.AllowableValues %v",
		ErrNotSupported, resetType, resetCandidates(resetType), allowed)
}

func isRestart(resetType string) bool {
	switch resetType {
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		return true
	}
	return false
}
