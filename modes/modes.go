// Package modes says, for each way CURE can be run against a node, which
// phases run, in which order, who runs them, and what the mode may never touch.
// Both the coordinator and the runner consult it, so the read-only guarantee of
// audit, verify and diagnostic, and the disks-untouched guarantee of service,
// are one table rather than scattered checks.
package modes

import (
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Mode is one way of running CURE against a node.
type Mode string

const (
	Provision  Mode = "provision"
	Audit      Mode = "audit"
	Verify     Mode = "verify"
	Diagnostic Mode = "diagnostic"
	Burnin     Mode = "burnin"
	Wipe       Mode = "wipe"
	// Service brings a deployed node's firmware and BIOS settings to its
	// SKU and returns it to its installed OS; it never writes a disk.
	Service Mode = "service"
	// Inspect is an enlisting machine's (docs/SECURITY.md "Enlistment"): an
	// unknown machine booted CURE to report what it is. It never writes,
	// has no phases and is no run's mode: All leaves it out, Parse refuses
	// it and the wire has no value for it.
	Inspect Mode = "inspect"
)

// All lists every mode, so a check over "every plan" (every phase has an
// executor on its side) cannot miss one.
func All() []Mode { return []Mode{Provision, Audit, Verify, Diagnostic, Burnin, Wipe, Service} }

// Owner says which side executes a phase.
type Owner string

const (
	Coordinator Owner = "coordinator"
	Runner      Owner = "runner"
)

// PhaseName names a phase, as stored (a plain string in the runs, phases
// and events tables and the pipeline's JSON) and shown. A name from the
// wire becomes one only through ParsePhase.
type PhaseName string

// Phase names, as stored and shown.
const (
	Preflight     PhaseName = "preflight"
	SetBootPXE    PhaseName = "set_boot_order_pxe"
	PoweringOn    PhaseName = "powering_on"
	WaitForCURE   PhaseName = "wait_for_cure"
	Hardware      PhaseName = "hardware"
	BMC           PhaseName = "bmc"
	BIOS          PhaseName = "bios"
	BIOSSettings  PhaseName = "bios_settings"
	HGX           PhaseName = "hgx"
	NIC           PhaseName = "nic"
	DPU           PhaseName = "dpu"
	NVMe          PhaseName = "nvme"
	SEDRevert     PhaseName = "sed_revert"
	OSInstall     PhaseName = "os_install"
	SetBootDisk   PhaseName = "set_boot_order_disk"
	WaitForHostOS PhaseName = "wait_for_host_os"
	Validate      PhaseName = "validate"
	PowerOffAtEnd PhaseName = "power_off"
)

// PhaseNames lists every phase name, in provision's order and then the
// suite's.
func PhaseNames() []PhaseName {
	return []PhaseName{Preflight, SetBootPXE, PoweringOn, WaitForCURE, Hardware, BMC, BIOS, BIOSSettings, HGX,
		NIC, DPU, NVMe, SEDRevert, OSInstall, SetBootDisk, WaitForHostOS, Validate, PowerOffAtEnd}
}

// ParsePhase is the phase named s, if CURE has one by that name.
func ParsePhase(s string) (PhaseName, bool) {
	for _, n := range PhaseNames() {
		if string(n) == s {
			return n, true
		}
	}
	return "", false
}

// PhaseStrings is names as plain strings: what the wire (the proto's
// repeated phase names) and messages carry.
func PhaseStrings(names []PhaseName) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return out
}

// Phase is one step of a plan.
type Phase struct {
	Name  PhaseName
	Owner Owner
	// Writes is true when the phase can change firmware, BIOS or disk contents.
	Writes bool
}

// Plan is the ordered phase list of a mode plus its write policy.
type Plan struct {
	Mode   Mode
	Phases []Phase
	// MayWrite is false for modes that must never flash firmware, change BIOS
	// settings or write a disk.
	MayWrite bool
	// MayWriteDisks is true only for the modes that end a node's tenancy
	// (provision, wipe): the others leave every disk's bytes as they found
	// them, service included, which may flash firmware.
	MayWriteDisks bool
}

var (
	// hardware compares the node with its SKU's spec.hardware (read only).
	// In provision it is the gate before anything is written: right after
	// the runner registers, ahead of every firmware phase.
	hardware  = Phase{Hardware, Runner, false}
	pxe       = Phase{SetBootPXE, Coordinator, false}
	powerOn   = Phase{PoweringOn, Coordinator, false}
	waitCURE  = Phase{WaitForCURE, Coordinator, false}
	preflight = Phase{Preflight, Coordinator, false}
)

// provisionPhases are the provisioning pipeline (docs/ARCHITECTURE.md, Phase
// flow). The one-time PXE override is armed before power-on so a node that
// is off spends no boot on its old disk.
var provisionPhases = []Phase{
	preflight, pxe, powerOn, waitCURE, hardware,
	{BMC, Coordinator, true},
	{BIOS, Coordinator, true},
	{BIOSSettings, Coordinator, true},
	{HGX, Coordinator, true},
	{NIC, Runner, true},
	{DPU, Runner, true},
	{NVMe, Runner, true},
	{SEDRevert, Runner, true},
	{OSInstall, Runner, true},
	{SetBootDisk, Coordinator, false},
	{WaitForHostOS, Coordinator, false},
}

// readOnlyFirmwarePhases are the comparison-only versions of the firmware
// phases used by audit and verify.
var readOnlyFirmwarePhases = []Phase{
	preflight, pxe, powerOn, waitCURE,
	{BMC, Coordinator, false},
	{BIOS, Coordinator, false},
	{BIOSSettings, Coordinator, false},
	{HGX, Coordinator, false},
	{NIC, Runner, false},
	{DPU, Runner, false},
	{NVMe, Runner, false},
}

// servicePhases are provision's without the disk phases: the firmware
// and BIOS settings written as provision writes them, then the node boots
// its installed OS again (which calls back). The hardware gate stays first.
var servicePhases = []Phase{
	preflight, pxe, powerOn, waitCURE, hardware,
	{BMC, Coordinator, true},
	{BIOS, Coordinator, true},
	{BIOSSettings, Coordinator, true},
	{HGX, Coordinator, true},
	{NIC, Runner, true},
	{DPU, Runner, true},
	{NVMe, Runner, true},
	{SetBootDisk, Coordinator, false},
	{WaitForHostOS, Coordinator, false},
}

// suitePhases are diagnostic's and burn-in's: the suite, then how it ends
// (manifests.ValidationSuiteSpec.End). Each end phase runs only under its
// policy and is skipped otherwise: back to the host OS (boot from disk,
// the OS's callback where the node has one on record), powered off, or
// left in CURE (all skipped, what a suite without spec.end does).
var suitePhases = []Phase{preflight, pxe, powerOn, waitCURE, hardware, {Validate, Runner, false},
	{SetBootDisk, Coordinator, false}, {WaitForHostOS, Coordinator, false}, {PowerOffAtEnd, Coordinator, false}}

// For returns the plan of a mode.
func For(m Mode) (Plan, error) {
	switch m {
	case Provision:
		return Plan{Mode: m, Phases: provisionPhases, MayWrite: true, MayWriteDisks: true}, nil
	case Audit, Verify:
		return Plan{Mode: m, Phases: readOnlyFirmwarePhases}, nil
	case Diagnostic, Burnin:
		return Plan{Mode: m, Phases: suitePhases}, nil
	case Wipe:
		return Plan{Mode: m, MayWrite: true, MayWriteDisks: true, Phases: []Phase{preflight, pxe, powerOn, waitCURE,
			{SEDRevert, Runner, true}, {PowerOffAtEnd, Coordinator, false}}}, nil
	case Service:
		return Plan{Mode: m, Phases: servicePhases, MayWrite: true}, nil
	case Inspect:
		return Plan{Mode: m}, nil
	}
	return Plan{}, fmt.Errorf("unknown mode %q (want provision, audit, verify, diagnostic, burnin, wipe or service)", string(m))
}

// Parse reads a mode name as typed by an operator.
func Parse(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	if m == Inspect {
		return "", fmt.Errorf("mode inspect is enlistment's (provisioner-lite --enlist), not a run an operator starts")
	}
	if _, err := For(m); err != nil {
		return "", err
	}
	return m, nil
}

// Index returns the position of phase name in the plan, or -1.
func (p Plan) Index(name PhaseName) int {
	for i, ph := range p.Phases {
		if ph.Name == name {
			return i
		}
	}
	return -1
}

// Phase returns the named phase of the plan.
func (p Plan) Phase(name PhaseName) (Phase, bool) {
	if i := p.Index(name); i >= 0 {
		return p.Phases[i], true
	}
	return Phase{}, false
}

// Unexecutable returns the phases of the plan owned by owner for which has
// reports no executor: each side's test that every phase it owns can run.
func (p Plan) Unexecutable(owner Owner, has func(phase PhaseName) bool) []PhaseName {
	var missing []PhaseName
	for _, ph := range p.Phases {
		if ph.Owner == owner && !has(ph.Name) {
			missing = append(missing, ph.Name)
		}
	}
	return missing
}

// CheckWrite refuses a writing action in a mode that must not write. Every
// code path that flashes, wipes or installs calls it first.
func CheckWrite(m Mode, action string) error {
	p, err := For(m)
	if err != nil {
		return fmt.Errorf("%s refused: %w", action, err)
	}
	if !p.MayWrite {
		return fmt.Errorf("%s refused: mode %s never writes firmware, BIOS settings or disks", action, m)
	}
	return nil
}

// CheckDiskWrite refuses writing a disk (an OS image, a seed, a wipe) in
// a mode that must leave disks as it found them: every mode but provision
// and wipe. Service flashes firmware (CheckWrite passes) yet fails here.
func CheckDiskWrite(m Mode, action string) error {
	if err := CheckWrite(m, action); err != nil {
		return err
	}
	p, _ := For(m) // CheckWrite resolved it
	if !p.MayWriteDisks {
		return fmt.Errorf("%s refused: mode %s never writes a disk (only provision and wipe do)", action, m)
	}
	return nil
}

// CheckWipe refuses erasing disks unless the mode is provision or wipe:
// audit, verify, diagnostic, burn-in and service never erase one (burn-in
// may write test patterns elsewhere, but a wipe is the provisioning flow's
// job). tools/wipe holds no policy of its own: it refuses unless the
// caller grants it AllowDestructive, which the runner does only after this
// check.
func CheckWipe(m Mode) error {
	if err := CheckDiskWrite(m, "wipe"); err != nil {
		return err
	}
	if m != Provision && m != Wipe {
		return fmt.Errorf("wipe refused: mode %s does not erase disks (only provision and wipe do)", m)
	}
	return nil
}

// FlashesFirmware says whether a mode brings drifted firmware and BIOS
// settings to the manifest (its firmware phases write); the others only
// report drift.
func FlashesFirmware(m Mode) bool {
	p, err := For(m)
	if err != nil || !p.MayWrite {
		return false
	}
	ph, ok := p.Phase(BMC)
	return ok && ph.Writes
}

// ToProto converts a mode to its wire value.
func ToProto(m Mode) curev1.Mode {
	switch m {
	case Provision:
		return curev1.Mode_MODE_PROVISION
	case Audit:
		return curev1.Mode_MODE_AUDIT
	case Verify:
		return curev1.Mode_MODE_VERIFY
	case Diagnostic:
		return curev1.Mode_MODE_DIAGNOSTIC
	case Burnin:
		return curev1.Mode_MODE_BURNIN
	case Wipe:
		return curev1.Mode_MODE_WIPE
	case Service:
		return curev1.Mode_MODE_SERVICE
	case Inspect:
		// No run has it: an enlisting machine gets no assignment.
	}
	return curev1.Mode_MODE_UNSPECIFIED
}

// FromProto converts a wire mode; unspecified is an error, never a default.
func FromProto(m curev1.Mode) (Mode, error) {
	switch m {
	case curev1.Mode_MODE_PROVISION:
		return Provision, nil
	case curev1.Mode_MODE_AUDIT:
		return Audit, nil
	case curev1.Mode_MODE_VERIFY:
		return Verify, nil
	case curev1.Mode_MODE_DIAGNOSTIC:
		return Diagnostic, nil
	case curev1.Mode_MODE_BURNIN:
		return Burnin, nil
	case curev1.Mode_MODE_WIPE:
		return Wipe, nil
	case curev1.Mode_MODE_SERVICE:
		return Service, nil
	case curev1.Mode_MODE_UNSPECIFIED:
	}
	return "", fmt.Errorf("mode %v is not a mode CURE runs", m)
}
