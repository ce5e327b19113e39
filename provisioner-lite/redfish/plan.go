package redfish

import (
	"fmt"
	"slices"
	"strings"
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
	// HTTPBootURI is Boot.HttpBootUri, where the BMC has the property: the
	// URI UEFI HTTP boot loads instead of asking DHCP.
	HTTPBootURI    string
	HasHTTPBootURI bool
}

// supportsUEFI: the BMC lists UEFI among the allowable modes, or lists none
// and is in UEFI mode already.
func (st bootState) supportsUEFI() bool {
	if len(st.AllowedModes) > 0 {
		return slices.Contains(st.AllowedModes, ModeUEFI)
	}
	return st.Mode == ModeUEFI
}

// parseBootState reads the Boot object out of a raw ComputerSystem body.
func parseBootState(raw []byte) (bootState, error) {
	d, err := parseSystemDoc(raw)
	if err != nil {
		return bootState{}, err
	}
	return d.bootState()
}

// bootPatch is the Boot object to PATCH; empty fields are left out.
type bootPatch struct {
	Target      string `json:"BootSourceOverrideTarget,omitempty"`
	Enabled     string `json:"BootSourceOverrideEnabled,omitempty"`
	Mode        string `json:"BootSourceOverrideMode,omitempty"`
	HTTPBootURI string `json:"HttpBootUri,omitempty"`
	// Note explains a deliberate deviation from what was asked (logged).
	Note string `json:"-"`
}

func (p bootPatch) empty() bool {
	return p.Target == "" && p.Enabled == "" && p.Mode == "" && p.HTTPBootURI == ""
}

// bootWant is what the caller asks of the override.
type bootWant struct {
	Target BootTarget
	Once   bool
	Mode   BootModePolicy
	// HTTPBootURI is set as Boot.HttpBootUri with a UefiHttp target, where
	// the BMC has the property.
	HTTPBootURI string
}

// networkTarget: a target that boots over the network, where the boot
// mode decides which firmware network stack (and which iPXE build) runs.
func networkTarget(t BootTarget) bool { return t == BootPxe || t == BootUefiHttp }

// planBootOverride computes the PATCH that makes the BMC boot w.Target next
// (once) or from now on (!once). An empty patch means nothing to change.
func planBootOverride(st bootState, w bootWant) (bootPatch, error) {
	target := w.Target
	if target == "" {
		return bootPatch{}, fmt.Errorf("boot target is empty (want %s or %s)", BootPxe, BootHdd)
	}
	var notes []string
	if target == BootUefiHttp && len(st.AllowedTargets) > 0 && !slices.Contains(st.AllowedTargets, string(BootUefiHttp)) {
		// UEFI HTTP boot is a choice of path, not of outcome: PXE reaches
		// the same boot script.
		notes = append(notes, fmt.Sprintf("BMC offers no UefiHttp target (allowable %v): using Pxe", st.AllowedTargets))
		target = BootPxe
	}
	if len(st.AllowedTargets) > 0 && !slices.Contains(st.AllowedTargets, string(target)) {
		return bootPatch{}, fmt.Errorf("%w: boot target %q is not in BootSourceOverrideTarget@Redfish.AllowableValues %v",
			ErrNotSupported, target, st.AllowedTargets)
	}
	mode, modeNote, err := planMode(st, w.Mode, target)
	if err != nil {
		return bootPatch{}, err
	}
	if modeNote != "" {
		notes = append(notes, modeNote)
	}
	note := strings.Join(notes, "; ")
	want := "Continuous"
	if w.Once {
		want = "Once"
	}
	if target == BootNone {
		want = "Disabled"
	}
	p := bootPatch{Note: note}
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
	uri := ""
	if target == BootUefiHttp && w.HTTPBootURI != "" && st.HasHTTPBootURI {
		uri = w.HTTPBootURI
	}
	if st.Target == string(target) && st.Enabled == want && (mode == "" || mode == st.Mode) && (uri == "" || uri == st.HTTPBootURI) {
		return bootPatch{Note: note}, nil // already so: compare first, act only on a delta
	}
	p.Enabled = want
	if target != BootNone {
		p.Target = string(target)
	}
	p.Mode = mode
	p.HTTPBootURI = uri
	return p, nil
}

// planMode is the BootSourceOverrideMode to send ("" leaves it out).
// Network boots go UEFI where the BMC shows UEFI support (auto) or where
// asked; disk boots keep the mode the node is in (the OS was installed
// from a boot in that mode). The current mode is repeated where the system
// has one: some BMCs fall back to Legacy when a PATCH leaves it out.
func planMode(st bootState, pol BootModePolicy, target BootTarget) (string, string, error) {
	if !st.HasMode {
		if target == BootUefiHttp || pol == BootModeUEFI || pol == BootModeLegacy {
			return "", "BMC has no BootSourceOverrideMode: the boot mode is the firmware's setting", nil
		}
		return "", "", nil
	}
	want := ""
	switch pol {
	case BootModeUEFI:
		want = ModeUEFI
	case BootModeLegacy:
		want = ModeLegacy
	case BootModeAuto, "":
		if networkTarget(target) && st.supportsUEFI() {
			want = ModeUEFI
		}
	default:
		return "", "", fmt.Errorf("boot mode policy %q: want auto, uefi or legacy", pol)
	}
	if target == BootUefiHttp {
		if want == ModeLegacy {
			return "", "", fmt.Errorf("%w: UEFI HTTP boot with boot mode Legacy", ErrNotSupported)
		}
		want = ModeUEFI
	}
	if want == "" {
		return st.Mode, "", nil
	}
	if len(st.AllowedModes) > 0 && !slices.Contains(st.AllowedModes, want) {
		return "", "", fmt.Errorf("%w: BootSourceOverrideMode %q is not in the allowable values %v", ErrNotSupported, want, st.AllowedModes)
	}
	return want, "", nil
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
