package modes

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestReadOnlyModesHaveNoWritingPhase(t *testing.T) {
	for _, m := range []Mode{Audit, Verify, Diagnostic, Burnin} {
		p, err := For(m)
		if err != nil {
			t.Fatal(err)
		}
		if p.MayWrite {
			t.Errorf("%s: MayWrite = true", m)
		}
		for _, ph := range p.Phases {
			if ph.Writes {
				t.Errorf("%s: phase %s writes", m, ph.Name)
			}
			if ph.Name == OSInstall || ph.Name == SEDRevert {
				t.Errorf("%s: has destructive phase %s", m, ph.Name)
			}
		}
		if err := CheckWrite(m, "os image write"); err == nil || !strings.Contains(err.Error(), string(m)) {
			t.Errorf("%s: CheckWrite = %v, want refusal naming the mode", m, err)
		}
	}
}

func TestProvisionOrder(t *testing.T) {
	p, err := For(Provision)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckWrite(Provision, "install"); err != nil {
		t.Fatalf("provision refused a write: %v", err)
	}
	order := []PhaseName{Preflight, SetBootPXE, PoweringOn, WaitForCURE, Hardware, BMC, BIOS, BIOSSettings, HGX, NIC, DPU, NVMe, SEDRevert, OSInstall, SetBootDisk, WaitForHostOS}
	if len(p.Phases) != len(order) {
		t.Fatalf("got %d phases, want %d", len(p.Phases), len(order))
	}
	for i, name := range order {
		if p.Phases[i].Name != name {
			t.Errorf("phase %d = %s, want %s", i, p.Phases[i].Name, name)
		}
	}
	if ph, _ := p.Phase(NVMe); ph.Owner != Runner {
		t.Errorf("nvme owner = %s", ph.Owner)
	}
}

func TestParseAndProto(t *testing.T) {
	for _, m := range []Mode{Provision, Audit, Verify, Diagnostic, Burnin, Wipe, Service} {
		got, err := Parse(" " + strings.ToUpper(string(m)))
		if err != nil || got != m {
			t.Errorf("Parse(%s) = %v, %v", m, got, err)
		}
		back, err := FromProto(ToProto(m))
		if err != nil || back != m {
			t.Errorf("proto round trip %s = %v, %v", m, back, err)
		}
	}
	if _, err := Parse("yolo"); err == nil {
		t.Error("Parse accepted an unknown mode")
	}
	if _, err := FromProto(0); err == nil {
		t.Error("FromProto accepted MODE_UNSPECIFIED")
	}
}

// The hardware gate comes before every phase that writes, in every mode
// that has it, and is itself read-only.
func TestHardwareGateFirst(t *testing.T) {
	for _, m := range []Mode{Provision, Diagnostic, Burnin, Service} {
		p, _ := For(m)
		i := p.Index(Hardware)
		if i < 0 {
			t.Fatalf("%s: no hardware phase", m)
		}
		if ph := p.Phases[i]; ph.Writes || ph.Owner != Runner {
			t.Errorf("%s: hardware = %+v", m, ph)
		}
		for j, ph := range p.Phases {
			if ph.Writes && j < i {
				t.Errorf("%s: %s writes before the hardware gate", m, ph.Name)
			}
		}
	}
	for _, m := range []Mode{Audit, Verify, Wipe} {
		if p, _ := For(m); p.Index(Hardware) >= 0 {
			t.Errorf("%s runs the hardware check", m)
		}
	}
}

// Only provision and wipe erase disks; every other mode, and an unknown
// one, is refused with the mode named (tools/wipe relies on this check
// being made before it is granted AllowDestructive).
func TestCheckWipe(t *testing.T) {
	for _, m := range []Mode{Audit, Verify, Diagnostic, Burnin, Service, "bogus"} {
		if err := CheckWipe(m); err == nil || !strings.Contains(err.Error(), string(m)) {
			t.Errorf("mode %s: CheckWipe = %v, want a refusal naming it", m, err)
		}
	}
	for _, m := range []Mode{Provision, Wipe} {
		if err := CheckWipe(m); err != nil {
			t.Errorf("mode %s refused: %v", m, err)
		}
	}
}

func TestAllModes(t *testing.T) {
	seen := map[Mode]bool{}
	for _, m := range All() {
		if seen[m] {
			t.Errorf("%s listed twice", m)
		}
		seen[m] = true
		if got, err := Parse(string(m)); err != nil || got != m {
			t.Errorf("Parse(%q) = %q, %v", m, got, err)
		}
		if _, err := FromProto(ToProto(m)); err != nil {
			t.Errorf("%s has no wire value: %v", m, err)
		}
	}
	// Every wire mode is in All, so a mode added to the proto is not missed.
	for v := range curev1.Mode_name {
		if m, err := FromProto(curev1.Mode(v)); err == nil && !seen[m] {
			t.Errorf("mode %s is on the wire but not in All", m)
		}
	}
}

func TestUnexecutable(t *testing.T) {
	p := Plan{Phases: []Phase{{"a", Coordinator, false}, {"b", Runner, false}, {"c", Coordinator, true}, {"d", Runner, true}}}
	has := func(name PhaseName) bool { return name == "a" || name == "d" }
	if got := p.Unexecutable(Coordinator, has); len(got) != 1 || got[0] != "c" {
		t.Errorf("coordinator: %v, want [c]", got)
	}
	if got := p.Unexecutable(Runner, has); len(got) != 1 || got[0] != "b" {
		t.Errorf("runner: %v, want [b]", got)
	}
}

// Service flashes firmware and BIOS settings but writes no disk: it has
// no disk phase, its firmware phases are the writing ones, and the disk
// policy refuses it every disk write by name, as it refuses the read-only
// modes; only provision and wipe pass it.
func TestServiceNeverWritesDisks(t *testing.T) {
	p, err := For(Service)
	if err != nil {
		t.Fatal(err)
	}
	if !p.MayWrite || p.MayWriteDisks {
		t.Errorf("service: MayWrite=%v MayWriteDisks=%v, want true, false", p.MayWrite, p.MayWriteDisks)
	}
	for _, ph := range p.Phases {
		if ph.Name == OSInstall || ph.Name == SEDRevert {
			t.Errorf("service has disk phase %s", ph.Name)
		}
	}
	for _, name := range []PhaseName{BMC, BIOS, BIOSSettings, HGX, NIC, DPU, NVMe} {
		if ph, ok := p.Phase(name); !ok || !ph.Writes {
			t.Errorf("service: firmware phase %s = %+v, %v; want a writing phase", name, ph, ok)
		}
	}
	if last := p.Phases[len(p.Phases)-2:]; last[0].Name != SetBootDisk || last[1].Name != WaitForHostOS {
		t.Errorf("service ends %v, want set_boot_order_disk then wait_for_host_os", last)
	}
	if err := CheckWrite(Service, "nvme firmware update"); err != nil {
		t.Errorf("service refused a firmware write: %v", err)
	}
	for _, m := range []Mode{Service, Audit, Verify, Diagnostic, Burnin, "bogus"} {
		for _, action := range []string{"os_install", "first-boot seed", "wipe"} {
			if err := CheckDiskWrite(m, action); err == nil || !strings.Contains(err.Error(), string(m)) || !strings.Contains(err.Error(), action) {
				t.Errorf("CheckDiskWrite(%s, %s) = %v, want a refusal naming both", m, action, err)
			}
		}
	}
	for _, m := range []Mode{Provision, Wipe} {
		if err := CheckDiskWrite(m, "os_install"); err != nil {
			t.Errorf("CheckDiskWrite(%s) = %v", m, err)
		}
	}
	for m, want := range map[Mode]bool{Provision: true, Service: true, Audit: false, Verify: false, Diagnostic: false, Burnin: false, Wipe: false, "bogus": false} {
		if got := FlashesFirmware(m); got != want {
			t.Errorf("FlashesFirmware(%s) = %v, want %v", m, got, want)
		}
	}
}

// A suite mode ends by its suite's policy: the end phases follow validate
// and never write.
func TestSuiteEndPhases(t *testing.T) {
	for _, m := range []Mode{Diagnostic, Burnin} {
		p, _ := For(m)
		v := p.Index(Validate)
		for _, name := range []PhaseName{SetBootDisk, WaitForHostOS, PowerOffAtEnd} {
			i := p.Index(name)
			if i <= v {
				t.Errorf("%s: %s at %d, validate at %d", m, name, i, v)
			}
			if ph := p.Phases[i]; ph.Writes || ph.Owner != Coordinator {
				t.Errorf("%s: %+v", m, ph)
			}
		}
	}
}

// Every phase of every plan is in PhaseNames, once, and parses back from
// its stored string; anything else does not parse.
func TestParsePhase(t *testing.T) {
	seen := map[PhaseName]bool{}
	for _, n := range PhaseNames() {
		if seen[n] {
			t.Errorf("phase %s listed twice", n)
		}
		seen[n] = true
		if got, ok := ParsePhase(string(n)); !ok || got != n {
			t.Errorf("ParsePhase(%q) = %q, %v", n, got, ok)
		}
	}
	for _, m := range All() {
		p, _ := For(m)
		for _, ph := range p.Phases {
			if !seen[ph.Name] {
				t.Errorf("mode %s: phase %s is not in PhaseNames", m, ph.Name)
			}
		}
	}
	for _, s := range []string{"", "NVME", "nvme ", "flash_the_moon"} {
		if got, ok := ParsePhase(s); ok {
			t.Errorf("ParsePhase(%q) = %q, want none", s, got)
		}
	}
}

// Inspect (enlistment) refuses every write CheckWrite, CheckDiskWrite and
// CheckWipe guard, as audit and diagnostic do; it has no phase, no wire
// value, and an operator cannot name it.
func TestInspectNeverWrites(t *testing.T) {
	p, err := For(Inspect)
	if err != nil {
		t.Fatal(err)
	}
	if p.MayWrite || p.MayWriteDisks || len(p.Phases) != 0 {
		t.Fatalf("inspect plan %+v: want no phase and no write", p)
	}
	for _, action := range []string{"flash BMC", "BIOS settings", "os_install", "nvme format"} {
		if err := CheckWrite(Inspect, action); err == nil || !strings.Contains(err.Error(), "never writes") {
			t.Errorf("CheckWrite(inspect, %s) = %v, want refused", action, err)
		}
		if err := CheckDiskWrite(Inspect, action); err == nil {
			t.Errorf("CheckDiskWrite(inspect, %s) allowed", action)
		}
	}
	if err := CheckWipe(Inspect); err == nil {
		t.Error("CheckWipe(inspect) allowed")
	}
	if FlashesFirmware(Inspect) {
		t.Error("inspect flashes firmware")
	}
	if _, err := Parse("inspect"); err == nil {
		t.Error("Parse(inspect) accepted: an operator could start an inspect run")
	}
	if ToProto(Inspect) != curev1.Mode_MODE_UNSPECIFIED {
		t.Error("inspect has a wire value")
	}
	for _, m := range All() {
		if m == Inspect {
			t.Error("All lists inspect")
		}
	}
}
