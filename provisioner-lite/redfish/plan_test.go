package redfish

import (
	"errors"
	"testing"
)

func TestPlanBootOverride(t *testing.T) {
	full := bootState{Target: "None", Enabled: "Disabled", Mode: "UEFI", HasMode: true,
		AllowedTargets: []string{"None", "Pxe", "Hdd"}, AllowedEnabled: []string{"Disabled", "Once", "Continuous"}}
	lenovo := full
	lenovo.AllowedEnabled = []string{"Disabled", "Once"}
	noMode := full
	noMode.HasMode, noMode.Mode = false, ""
	already := full
	already.Target, already.Enabled = "Pxe", "Once"
	bare := bootState{Target: "None", Enabled: "Disabled"} // no allowables published

	cases := []struct {
		name    string
		st      bootState
		target  BootTarget
		once    bool
		want    bootPatch
		wantErr error
	}{
		{"once pxe keeps mode", full, BootPxe, true, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}, nil},
		{"continuous hdd", full, BootHdd, false, bootPatch{Target: "Hdd", Enabled: "Continuous", Mode: "UEFI"}, nil},
		{"no mode property", noMode, BootPxe, true, bootPatch{Target: "Pxe", Enabled: "Once"}, nil},
		{"already set", already, BootPxe, true, bootPatch{}, nil},
		{"none disables", already, BootNone, true, bootPatch{Enabled: "Disabled", Mode: "UEFI"}, nil},
		{"no allowables", bare, BootPxe, false, bootPatch{Target: "Pxe", Enabled: "Continuous"}, nil},
		{"lenovo once", lenovo, BootPxe, true, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}, nil},
		{"lenovo persistent pxe", lenovo, BootPxe, false, bootPatch{}, ErrNotSupported},
		{"target not offered", full, "Cd", true, bootPatch{}, ErrNotSupported},
	}
	for _, c := range cases {
		got, err := planBootOverride(c.st, bootWant{Target: c.target, Once: c.once})
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) {
				t.Errorf("%s: err %v, want %v", c.name, err, c.wantErr)
			}
			continue
		}
		got.Note = ""
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}

	// Lenovo, persistent disk: disable the override (disk-first order), and
	// say so.
	lenovo.Target, lenovo.Enabled = "Pxe", "Once"
	got, err := planBootOverride(lenovo, bootWant{Target: BootHdd})
	if err != nil || got.Enabled != "Disabled" || got.Target != "" || got.Note == "" {
		t.Errorf("lenovo persistent hdd: %+v, %v", got, err)
	}
	lenovo.Enabled = "Disabled"
	if got, _ := planBootOverride(lenovo, bootWant{Target: BootHdd}); !got.empty() {
		t.Errorf("lenovo persistent hdd when already disabled: %+v, want no change", got)
	}
}

func TestChooseReset(t *testing.T) {
	mockup := []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "ForceOn", "PushPowerButton"}
	for asked, want := range map[string]string{"PowerCycle": "ForceRestart", "On": "On", "ForceRestart": "ForceRestart"} {
		if got, err := chooseReset(asked, mockup); err != nil || got != want {
			t.Errorf("chooseReset(%s) = %s, %v; want %s", asked, got, err, want)
		}
	}
	if got, _ := chooseReset("On", []string{"PushPowerButton", "ForceOff"}); got != "PushPowerButton" {
		t.Errorf("On with only a power button: %s", got)
	}
	if _, err := chooseReset("GracefulShutdown", []string{"ForceOff"}); !errors.Is(err, ErrNotSupported) {
		t.Errorf("graceful shutdown must not silently become ForceOff: %v", err)
	}
	if got, _ := chooseReset("ForceOff", nil); got != "ForceOff" {
		t.Errorf("no allowables: %s", got)
	}
}

func TestParseBootState(t *testing.T) {
	st, err := parseBootState([]byte(`{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once",
		"BootSourceOverrideEnabled@Redfish.AllowableValues":["Disabled","Once"],"BootSourceOverrideMode":null}}`))
	if err != nil || st.Target != "Pxe" || st.Enabled != "Once" || !st.HasMode || st.Mode != "" || len(st.AllowedEnabled) != 2 {
		t.Fatalf("parse = %+v, %v", st, err)
	}
	if _, err := parseBootState([]byte(`{"Id":"1"}`)); err == nil {
		t.Fatal("a system without Boot parsed")
	}
}

func TestPlanBootMode(t *testing.T) {
	both := bootState{Target: "None", Enabled: "Disabled", Mode: "Legacy", HasMode: true,
		AllowedTargets: []string{"None", "Pxe", "Hdd", "UefiHttp"}, AllowedEnabled: []string{"Disabled", "Once", "Continuous"},
		AllowedModes: []string{"Legacy", "UEFI"}}
	legacyOnly := both
	legacyOnly.AllowedModes = []string{"Legacy"}
	inUEFI := both
	inUEFI.Mode = "UEFI"
	armedLegacy := both
	armedLegacy.Target, armedLegacy.Enabled = "Pxe", "Once"
	noHTTP := both
	noHTTP.AllowedTargets = []string{"None", "Pxe", "Hdd"}
	withURI := both
	withURI.HasHTTPBootURI = true
	noMode := both
	noMode.HasMode, noMode.Mode, noMode.AllowedModes = false, "", nil
	const uri = "http://10.0.0.1:8080/ipxe-bin/snponly.efi"

	cases := []struct {
		name     string
		st       bootState
		w        bootWant
		want     bootPatch
		wantErr  error
		wantNote bool
	}{
		{"auto: PXE goes UEFI where offered", both, bootWant{Target: BootPxe, Once: true}, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}, nil, false},
		{"auto: Legacy-only BMC keeps Legacy", legacyOnly, bootWant{Target: BootPxe, Once: true}, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "Legacy"}, nil, false},
		{"auto: disk keeps the UEFI the OS was installed in", inUEFI, bootWant{Target: BootHdd}, bootPatch{Target: "Hdd", Enabled: "Continuous", Mode: "UEFI"}, nil, false},
		{"auto: disk keeps Legacy", both, bootWant{Target: BootHdd}, bootPatch{Target: "Hdd", Enabled: "Continuous", Mode: "Legacy"}, nil, false},
		{"armed PXE in the wrong mode is re-patched", armedLegacy, bootWant{Target: BootPxe, Once: true}, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}, nil, false},
		{"uefi on a Legacy-only BMC", legacyOnly, bootWant{Target: BootPxe, Once: true, Mode: BootModeUEFI}, bootPatch{}, ErrNotSupported, false},
		{"legacy asked", both, bootWant{Target: BootPxe, Once: true, Mode: BootModeLegacy}, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "Legacy"}, nil, false},
		{"legacy asked for the disk too", inUEFI, bootWant{Target: BootHdd, Mode: BootModeLegacy}, bootPatch{Target: "Hdd", Enabled: "Continuous", Mode: "Legacy"}, nil, false},
		{"UefiHttp offered", both, bootWant{Target: BootUefiHttp, Once: true, HTTPBootURI: uri}, bootPatch{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI"}, nil, false},
		{"UefiHttp with HttpBootUri", withURI, bootWant{Target: BootUefiHttp, Once: true, HTTPBootURI: uri}, bootPatch{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI", HTTPBootURI: uri}, nil, false},
		{"UefiHttp not offered falls back to Pxe", noHTTP, bootWant{Target: BootUefiHttp, Once: true}, bootPatch{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}, nil, true},
		{"UefiHttp in Legacy", both, bootWant{Target: BootUefiHttp, Once: true, Mode: BootModeLegacy}, bootPatch{}, ErrNotSupported, false},
		{"no mode property: uefi asked, said so", noMode, bootWant{Target: BootPxe, Once: true, Mode: BootModeUEFI}, bootPatch{Target: "Pxe", Enabled: "Once"}, nil, true},
	}
	for _, c := range cases {
		got, err := planBootOverride(c.st, c.w)
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) {
				t.Errorf("%s: err %v, want %v", c.name, err, c.wantErr)
			}
			continue
		}
		if (got.Note != "") != c.wantNote {
			t.Errorf("%s: note %q, want one: %v", c.name, got.Note, c.wantNote)
		}
		got.Note = ""
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	// Armed already in UEFI: nothing to do.
	armed := armedLegacy
	armed.Mode = "UEFI"
	if got, err := planBootOverride(armed, bootWant{Target: BootPxe, Once: true}); err != nil || !got.empty() {
		t.Errorf("armed in UEFI: %+v, %v; want no change", got, err)
	}
	if _, err := ParseBootModePolicy("bios"); err == nil {
		t.Error("--boot-mode bios accepted")
	}
	if p, err := ParseBootModePolicy("UEFI"); err != nil || p != BootModeUEFI {
		t.Errorf("ParseBootModePolicy(UEFI) = %q, %v", p, err)
	}
}
