// Package wipe erases data disks before install: it picks the disks a
// selector names (refusing the boot medium and anything ambiguous), plans
// one erase method per disk from what the drive can do and what the
// policy demands, applies it through device seams (sed-opal ioctls, NVMe
// admin commands, block I/O), and proves the result with a marker written
// before and looked for after.
//
// Strength order, strongest first (the manifest's policy order):
//
//	psid-revert   TCG RevertTPer authenticated with the label PSID: new media
//	              keys (crypto erase) and every credential back to factory;
//	              works whoever owns the drive
//	revert-sid    the same RevertTPer authenticated with the owner's SID
//	crypto-erase  NVMe Sanitize crypto erase, or Format NVM SES=2
//	sanitize      NVMe Sanitize block erase; ATA enhanced SECURITY ERASE UNIT
//	format        NVMe Format NVM SES=1 (user data erase); ATA normal
//	              SECURITY ERASE UNIT
//
// The ATA erases sit by what ACS-3 promises, not by what drives often do.
// Enhanced erase writes vendor patterns to all user data including
// sectors retired by reallocation, so it reaches media a host overwrite
// cannot: sanitize. Many self-encrypting SSDs implement it as a key
// change, but nothing in IDENTIFY says so, so it never counts as
// crypto-erase. Normal erase only writes zeros or ones over the user
// addressable LBAs, like Format NVM's user data erase: format. Both run
// through a temporary user password (SET PASSWORD, ERASE PREPARE, ERASE
// UNIT); a drive the BIOS froze, or whose password is already set, is
// refused.
//
// A method of the policy's class is always acceptable; a weaker one only
// when the policy sets allowWeakerFallback; a stronger one is never
// substituted (the manifest said what to do).
package wipe

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

// Policy classes, as manifests spell them (spec.wipe.policy).
const (
	PolicyNone        = "none"
	PolicyPSIDRevert  = "psid-revert"
	PolicyRevertSID   = "revert-sid"
	PolicyCryptoErase = "crypto-erase"
	PolicySanitize    = "sanitize"
	PolicyFormat      = "format"
)

// strength ranks policy classes; higher is stronger.
var strength = map[string]int{
	PolicyPSIDRevert:  5,
	PolicyRevertSID:   4,
	PolicyCryptoErase: 3,
	PolicySanitize:    2,
	PolicyFormat:      1,
}

// Strength is the rank of a policy class (0 for none or unknown).
func Strength(policy string) int { return strength[policy] }

// Method is one concrete erase operation.
type Method string

const (
	MethodNone           Method = "none"
	MethodPSIDRevert     Method = "opal-psid-revert"
	MethodSIDRevert      Method = "opal-revert-sid"
	MethodSanitizeCrypto Method = "nvme-sanitize-crypto"
	MethodFormatCrypto   Method = "nvme-format-crypto"
	MethodSanitizeBlock  Method = "nvme-sanitize-block"
	MethodFormatUserData Method = "nvme-format-user-data"
	MethodATAEnhanced    Method = "ata-enhanced-erase"
	MethodATANormal      Method = "ata-security-erase"
)

// methodOrder lists every method strongest first.
var methodOrder = []Method{MethodPSIDRevert, MethodSIDRevert, MethodSanitizeCrypto, MethodFormatCrypto,
	MethodSanitizeBlock, MethodATAEnhanced, MethodFormatUserData, MethodATANormal}

// Class is the policy class a method satisfies.
func (m Method) Class() string {
	switch m {
	case MethodPSIDRevert:
		return PolicyPSIDRevert
	case MethodSIDRevert:
		return PolicyRevertSID
	case MethodSanitizeCrypto, MethodFormatCrypto:
		return PolicyCryptoErase
	case MethodSanitizeBlock, MethodATAEnhanced:
		return PolicySanitize
	case MethodFormatUserData, MethodATANormal:
		return PolicyFormat
	case MethodNone:
	}
	return PolicyNone
}

// Policy is the manifest's wipe policy for the selected disks.
type Policy struct {
	Method              string // one of the Policy* classes
	AllowWeakerFallback bool
}

// NVMeInfo is what the planner needs from Identify.
type NVMeInfo struct {
	Controller string // nvme0
	NSID       uint32
	OACS       uint16
	SANICAP    uint32
	FNA        uint8
	// Namespaces are every namespace block device of the controller; a
	// controller-wide erase must have all of them selected.
	Namespaces []string
}

// Target is one disk as probed: the facts a plan is computed from.
type Target struct {
	Disk blockdev.Disk
	// Opal is the Level 0 Discovery result; when nil, OpalErr says why
	// (errors.Is(OpalErr, opal.ErrNoTCG) means the drive has no TCG).
	Opal    *opal.Discovery
	OpalErr error
	NVMe    *NVMeInfo // nil for non-NVMe disks
	// ATA is IDENTIFY DEVICE of a SATA disk; when nil, ATAErr says why
	// (nil too when the disk has no ATA pass-through path).
	ATA    *ata.Identify
	ATAErr error
	// PSIDKnown / SIDKnown: the inventory has that credential for the
	// disk's serial.
	PSIDKnown, SIDKnown bool
	// Batch names every disk selected in this run; a method that erases
	// more than the one namespace needs its siblings in the batch.
	Batch []string
}

// Step is one method the executor may run, with the planner's reason.
type Step struct {
	Method Method
	Reason string
}

// Plan is the decision for one disk: Method first, then Fallbacks in
// order if a method turns out unsupported at run time. Rejected records
// every method not chosen and why, for the report.
type Plan struct {
	Disk      blockdev.Disk
	Policy    Policy
	Method    Method
	Reason    string
	Fallbacks []Step
	Rejected  []string
	NSID      uint32 // NVMe namespace the format applies to
}

// Steps is Method followed by the fallbacks.
func (p Plan) Steps() []Step {
	return append([]Step{{p.Method, p.Reason}}, p.Fallbacks...)
}

// PlanWipe decides how to erase t under policy p. It is a pure function of
// its inputs. It refuses (returns an error naming the disk) when no
// acceptable method fits, when the disk is the boot medium or read-only,
// or when Opal state could not be read.
func PlanWipe(t Target, p Policy) (Plan, error) {
	d := t.Disk
	fail := func(format string, a ...any) (Plan, error) {
		return Plan{}, fmt.Errorf("wipe %s (serial %q): %s", d.Name, d.Serial, fmt.Sprintf(format, a...))
	}
	if p.Method == PolicyNone {
		return Plan{Disk: d, Policy: p, Method: MethodNone, Reason: "policy is none"}, nil
	}
	want, ok := strength[p.Method]
	if !ok {
		return fail("unknown wipe policy %q (want none, psid-revert, revert-sid, crypto-erase, sanitize or format)", p.Method)
	}
	switch {
	case d.BootMedium:
		return fail("refusing: it is the medium CURE booted from")
	case d.ReadOnly:
		return fail("refusing: the disk is read-only")
	}
	if t.Opal == nil && t.OpalErr != nil && !errors.Is(t.OpalErr, opal.ErrNoTCG) {
		return fail("refusing: could not tell whether the drive is a self-encrypting drive: %v", t.OpalErr)
	}
	if t.Opal == nil && t.OpalErr == nil {
		return fail("refusing: Opal discovery was not run (probe the disk first)")
	}

	plan := Plan{Disk: d, Policy: p}
	if t.NVMe != nil {
		plan.NSID = t.NVMe.NSID
	}
	var steps []Step
	for _, m := range methodOrder {
		s := strength[m.Class()]
		if s > want {
			continue // never substitute a stronger method than asked
		}
		if s < want && !p.AllowWeakerFallback {
			plan.Rejected = append(plan.Rejected, fmt.Sprintf("%s: weaker than policy %s and allowWeakerFallback is false", m, p.Method))
			continue
		}
		reason, why := applicable(t, m)
		if why != "" {
			plan.Rejected = append(plan.Rejected, fmt.Sprintf("%s: %s", m, why))
			continue
		}
		if s < want {
			reason += fmt.Sprintf(" (weaker than policy %s; allowed by allowWeakerFallback)", p.Method)
		}
		steps = append(steps, Step{m, reason})
	}
	if len(steps) == 0 {
		return fail("no erase method satisfies policy %s (allowWeakerFallback=%t): %s",
			p.Method, p.AllowWeakerFallback, strings.Join(plan.Rejected, "; "))
	}
	plan.Method, plan.Reason, plan.Fallbacks = steps[0].Method, steps[0].Reason, steps[1:]
	return plan, nil
}

// applicable says whether m can run on t: a reason when it can, else why not.
func applicable(t Target, m Method) (reason, whyNot string) {
	o := t.Opal
	isRevert := m == MethodPSIDRevert || m == MethodSIDRevert
	if isRevert {
		switch {
		case o == nil:
			return "", "no TCG storage support (" + errString(t.OpalErr) + ")"
		case !o.SupportsRevert():
			return "", "SSC " + o.SSCName() + " has no RevertTPer the kernel drives"
		case !o.CryptoErasesOnRevert():
			return "", "SSC " + o.SSCName() + " does not erase user data on revert (no media encryption / crypto erase mechanism)"
		case m == MethodPSIDRevert && !t.PSIDKnown:
			return "", fmt.Sprintf("no PSID in the inventory for serial %q", t.Disk.Serial)
		case m == MethodSIDRevert && !t.SIDKnown:
			return "", fmt.Sprintf("no SID credential for serial %q", t.Disk.Serial)
		}
		if w := wholeController(t); w != "" {
			return "", "revert erases the whole drive but " + w
		}
		return fmt.Sprintf("%s drive: RevertTPer replaces the media encryption keys", o.SSCName()), ""
	}
	// Non-revert methods on a drive whose locking SP is active would meet
	// locked ranges (Data Protect) or leave the drive owned afterwards.
	if o != nil && o.Locking != nil && (o.Locking.Enabled || o.Locking.Locked) {
		return "", "Opal locking is enabled; only a revert resets it"
	}
	if m == MethodATAEnhanced || m == MethodATANormal {
		return ataApplicable(t, m == MethodATAEnhanced)
	}
	n := t.NVMe
	if n == nil {
		return "", fmt.Sprintf("transport %s: NVMe sanitize/format need an NVMe controller", t.Disk.Transport)
	}
	switch m {
	case MethodSanitizeCrypto, MethodSanitizeBlock:
		bit, name := uint32(nvme.SANICAPCryptoErase), "crypto erase"
		if m == MethodSanitizeBlock {
			bit, name = nvme.SANICAPBlockErase, "block erase"
		}
		if n.SANICAP&bit == 0 {
			return "", fmt.Sprintf("SANICAP %#x lacks %s", n.SANICAP, name)
		}
		if w := wholeController(t); w != "" {
			return "", "sanitize acts on the whole NVM subsystem but " + w
		}
		return fmt.Sprintf("SANICAP %#x reports sanitize %s", n.SANICAP, name), ""
	case MethodFormatCrypto, MethodFormatUserData:
		if n.OACS&nvme.OACSFormat == 0 {
			return "", fmt.Sprintf("OACS %#x lacks Format NVM", n.OACS)
		}
		if m == MethodFormatCrypto && n.FNA&nvme.FNACryptoErase == 0 {
			return "", fmt.Sprintf("FNA %#x lacks cryptographic erase", n.FNA)
		}
		if n.FNA&(nvme.FNAFormatAllNamespaces|nvme.FNAEraseAllNamespaces) != 0 {
			if w := wholeController(t); w != "" {
				return "", fmt.Sprintf("FNA %#x says a secure erase covers every namespace but %s", n.FNA, w)
			}
		}
		if m == MethodFormatCrypto {
			return fmt.Sprintf("FNA %#x reports Format NVM cryptographic erase", n.FNA), ""
		}
		return fmt.Sprintf("OACS %#x reports Format NVM (user data erase)", n.OACS), ""
	case MethodNone, MethodPSIDRevert, MethodSIDRevert, MethodATAEnhanced, MethodATANormal:
		// reverts and ATA are judged above; none is no method
	}
	return "", "unknown method"
}

// ataApplicable judges SECURITY ERASE UNIT from IDENTIFY DEVICE words 82
// and 128 (ACS-3 7.12.7). The erase needs a user password CURE sets
// itself, so every state where it cannot (frozen, locked, a password
// already set, attempts exhausted) is a refusal.
func ataApplicable(t Target, enhanced bool) (reason, whyNot string) {
	if t.Disk.Transport != "sata" {
		return "", fmt.Sprintf("transport %s: ATA security erase needs a SATA disk behind libata", t.Disk.Transport)
	}
	id := t.ATA
	if id == nil {
		return "", "no IDENTIFY DEVICE data (" + errString(t.ATAErr) + ")"
	}
	if why := ataRefusal(id, enhanced); why != "" {
		return "", why
	}
	est, mode := id.NormalErase, "normal"
	if enhanced {
		est, mode = id.EnhancedErase, "enhanced"
	}
	return fmt.Sprintf("IDENTIFY word 82 %#04x, word 128 %#04x, %s: %s SECURITY ERASE UNIT, drive estimates %s",
		id.Word82, id.Word128, id.Security.State(), mode, est), ""
}

// ataRefusal says why the security state rules the erase out, or "". The
// executor asks again right before setting the password.
func ataRefusal(id *ata.Identify, enhanced bool) string {
	s := id.Security
	words := fmt.Sprintf("IDENTIFY word 82 %#04x, word 128 %#04x", id.Word82, id.Word128)
	switch {
	case !s.Supported:
		return words + ": the drive does not support the Security feature set (word 82 bit 1 and word 128 bit 0 must both be set)"
	case s.Locked:
		return words + ": security is locked (word 128 bit 2) with a user password CURE does not know; unlock or erase it with the master password first"
	case s.Enabled:
		return words + ": security is enabled (word 128 bit 1): a user password CURE does not know is already set, and the erase needs to set its own"
	case s.CountExpired:
		return words + ": the password attempt counter expired (word 128 bit 4); power-cycle the drive"
	case s.Frozen:
		return words + ": security is frozen (word 128 bit 3): the BIOS froze the drive with SECURITY FREEZE LOCK at boot; " +
			"a suspend/resume cycle or hot-plugging the drive unfreezes it, and CURE does not do that automatically"
	case enhanced && !s.EnhancedErase:
		return words + ": no enhanced erase (word 128 bit 5 clear)"
	}
	return ""
}

// wholeController names the namespaces of t's controller missing from the
// batch, or "" when a controller-wide erase touches only selected disks.
func wholeController(t Target) string {
	if t.NVMe == nil {
		return ""
	}
	var missing []string
	for _, ns := range t.NVMe.Namespaces {
		if ns != t.Disk.Name && !slices.Contains(t.Batch, ns) {
			missing = append(missing, ns)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("namespaces %s of %s are not selected", strings.Join(missing, ", "), t.NVMe.Controller)
}

func errString(err error) string {
	if err == nil {
		return "not probed"
	}
	return err.Error()
}
