package wipe

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/ata/atafake"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

func nvmeDisk(name, serial string) blockdev.Disk {
	return blockdev.Disk{Name: name, Path: "/dev/" + name, Serial: serial, Transport: "nvme", SizeBytes: 1 << 30}
}

func opal2(enabled, locked bool) *opal.Discovery {
	return &opal.Discovery{
		TPer:    &opal.TPerFeature{Sync: true},
		Locking: &opal.LockingFeature{Supported: true, Enabled: enabled, Locked: locked, MediaEncryption: true},
		SSCs:    []opal.SSC{{Code: opal.FeatureOpalV2, Name: "Opal 2", BaseComID: 0x1000, NumComIDs: 1}},
	}
}

var noTCG = fmt.Errorf("%w: nvme status 0x4001", opal.ErrNoTCG)

// qemuNVMe is what QEMU 7.2's controller reports: Format NVM, no sanitize,
// no security commands.
func qemuNVMe() *NVMeInfo {
	return &NVMeInfo{Controller: "nvme0", NSID: 1, OACS: nvme.OACSFormat | nvme.OACSNSManagement, Namespaces: []string{"nvme0n1"}}
}

func fullNVMe() *NVMeInfo {
	return &NVMeInfo{Controller: "nvme0", NSID: 1, OACS: nvme.OACSFormat | nvme.OACSSecurity,
		SANICAP: nvme.SANICAPCryptoErase | nvme.SANICAPBlockErase, FNA: nvme.FNACryptoErase, Namespaces: []string{"nvme0n1"}}
}

func methods(p Plan) []Method {
	var m []Method
	for _, s := range p.Steps() {
		m = append(m, s.Method)
	}
	return m
}

// planCase is one PlanWipe call and the steps it must plan or, with want
// nil, the refusal it must give.
type planCase struct {
	name   string
	t      Target
	p      Policy
	want   []Method
	errHas string
}

// runPlanCases runs each case as a subtest; check looks further at a plan
// that was made with the wanted steps.
func runPlanCases(t *testing.T, cases []planCase, check func(t *testing.T, c planCase, p Plan)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanWipe(c.t, c.p)
			if c.want == nil {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("err = %v, want it to contain %q (plan %v)", err, c.errHas, methods(p))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(methods(p)) != fmt.Sprint(c.want) {
				t.Errorf("steps = %v, want %v\nrejected: %v", methods(p), c.want, p.Rejected)
			}
			check(t, c, p)
		})
	}
}

func TestPlanWipe(t *testing.T) {
	d := nvmeDisk("nvme0n1", "S1")
	cases := []planCase{
		{"psid on locked opal", Target{Disk: d, Opal: opal2(true, true), NVMe: fullNVMe(), PSIDKnown: true},
			Policy{Method: PolicyPSIDRevert}, []Method{MethodPSIDRevert}, ""},
		{"psid unknown, no fallback", Target{Disk: d, Opal: opal2(false, false), NVMe: fullNVMe()},
			Policy{Method: PolicyPSIDRevert}, nil, `no PSID in the inventory for serial "S1"`},
		{"psid unknown, fallback to crypto then weaker", Target{Disk: d, Opal: opal2(false, false), NVMe: fullNVMe(), SIDKnown: true},
			Policy{Method: PolicyPSIDRevert, AllowWeakerFallback: true},
			[]Method{MethodSIDRevert, MethodSanitizeCrypto, MethodFormatCrypto, MethodSanitizeBlock, MethodFormatUserData}, ""},
		{"locked opal blocks non-revert fallbacks", Target{Disk: d, Opal: opal2(true, true), NVMe: fullNVMe()},
			Policy{Method: PolicyPSIDRevert, AllowWeakerFallback: true}, nil, "Opal locking is enabled; only a revert resets it"},
		{"crypto-erase: both crypto methods, nothing weaker", Target{Disk: d, OpalErr: noTCG, NVMe: fullNVMe()},
			Policy{Method: PolicyCryptoErase}, []Method{MethodSanitizeCrypto, MethodFormatCrypto}, ""},
		{"format never upgraded to stronger", Target{Disk: d, OpalErr: noTCG, NVMe: fullNVMe()},
			Policy{Method: PolicyFormat}, []Method{MethodFormatUserData}, ""},
		{"qemu: format", Target{Disk: d, OpalErr: noTCG, NVMe: qemuNVMe()},
			Policy{Method: PolicyFormat}, []Method{MethodFormatUserData}, ""},
		{"qemu: crypto-erase refused without fallback", Target{Disk: d, OpalErr: noTCG, NVMe: qemuNVMe()},
			Policy{Method: PolicyCryptoErase}, nil, "SANICAP 0x0 lacks crypto erase; nvme-format-crypto: FNA 0x0 lacks cryptographic erase"},
		{"qemu: crypto-erase with fallback formats", Target{Disk: d, OpalErr: noTCG, NVMe: qemuNVMe()},
			Policy{Method: PolicyCryptoErase, AllowWeakerFallback: true}, []Method{MethodFormatUserData}, ""},
		{"pyrite revert does not erase", Target{Disk: d, PSIDKnown: true, NVMe: fullNVMe(), Opal: &opal.Discovery{
			TPer: &opal.TPerFeature{}, Locking: &opal.LockingFeature{Supported: true},
			SSCs: []opal.SSC{{Code: opal.FeaturePyriteV1, Name: "Pyrite 1"}}}},
			Policy{Method: PolicyPSIDRevert}, nil, "Pyrite 1 does not erase user data on revert"},
		{"discovery I/O error refuses", Target{Disk: d, OpalErr: fmt.Errorf("SG_IO: EIO"), NVMe: fullNVMe()},
			Policy{Method: PolicyFormat}, nil, "could not tell whether the drive is a self-encrypting drive"},
		{"not probed refuses", Target{Disk: d, NVMe: fullNVMe()}, Policy{Method: PolicyFormat}, nil, "discovery was not run"},
		{"sibling namespace not selected", Target{Disk: d, OpalErr: noTCG, Batch: []string{"nvme0n1"},
			NVMe: &NVMeInfo{Controller: "nvme0", NSID: 1, OACS: nvme.OACSFormat, SANICAP: nvme.SANICAPBlockErase, Namespaces: []string{"nvme0n1", "nvme0n2"}}},
			Policy{Method: PolicySanitize}, nil, "namespaces nvme0n2 of nvme0 are not selected"},
		{"sibling selected too", Target{Disk: d, OpalErr: noTCG, Batch: []string{"nvme0n1", "nvme0n2"},
			NVMe: &NVMeInfo{Controller: "nvme0", NSID: 1, OACS: nvme.OACSFormat, SANICAP: nvme.SANICAPBlockErase, Namespaces: []string{"nvme0n1", "nvme0n2"}}},
			Policy{Method: PolicySanitize}, []Method{MethodSanitizeBlock}, ""},
		{"sata without opal, IDENTIFY not run", Target{Disk: sataDisk(), OpalErr: noTCG},
			Policy{Method: PolicyFormat, AllowWeakerFallback: true}, nil, "ata-security-erase: no IDENTIFY DEVICE data (not probed)"},
		{"sata opal psid", Target{Disk: blockdev.Disk{Name: "sda", Serial: "W1", Transport: "sata"}, Opal: opal2(false, false), PSIDKnown: true},
			Policy{Method: PolicyPSIDRevert}, []Method{MethodPSIDRevert}, ""},
		{"boot medium", Target{Disk: blockdev.Disk{Name: "sda", Serial: "W1", BootMedium: true}, OpalErr: noTCG},
			Policy{Method: PolicyFormat}, nil, "medium CURE booted from"},
		{"unknown policy", Target{Disk: d, OpalErr: noTCG}, Policy{Method: "shred"}, nil, `unknown wipe policy "shred"`},
	}
	runPlanCases(t, cases, func(t *testing.T, c planCase, p Plan) {
		for _, s := range p.Steps() {
			if Strength(s.Method.Class()) > Strength(c.p.Method) {
				t.Errorf("%s is stronger than policy %s", s.Method, c.p.Method)
			}
			if Strength(s.Method.Class()) < Strength(c.p.Method) && (!c.p.AllowWeakerFallback || !strings.Contains(s.Reason, "allowWeakerFallback")) {
				t.Errorf("weaker step %s without allowWeakerFallback in reason: %q", s.Method, s.Reason)
			}
		}
	})
}

func sataDisk() blockdev.Disk {
	return blockdev.Disk{Name: "sda", Path: "/dev/sda", Serial: "W1", Transport: "sata", SizeBytes: 1 << 30}
}

// sataID is IDENTIFY DEVICE as the ata package parses it from a fake
// drive's 512-byte answer: security supported with enhanced erase, not
// frozen, no password, unless set changes that.
func sataID(t *testing.T, set func(d *atafake.Drive)) *ata.Identify {
	t.Helper()
	d := &atafake.Drive{Model: "FAKE SATA SSD", Serial: "W1", Sectors: 1 << 21, NormalTime: 3, EnhancedTime: 1}
	if set != nil {
		set(d)
	}
	id, err := ata.IdentifyDevice(d)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPlanATA(t *testing.T) {
	sda := sataDisk()
	good := sataID(t, nil)
	cases := []planCase{
		{"format: normal erase", Target{Disk: sda, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicyFormat}, []Method{MethodATANormal}, ""},
		{"sanitize: enhanced erase only", Target{Disk: sda, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicySanitize}, []Method{MethodATAEnhanced}, ""},
		{"sanitize with fallback: enhanced then normal", Target{Disk: sda, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicySanitize, AllowWeakerFallback: true}, []Method{MethodATAEnhanced, MethodATANormal}, ""},
		{"crypto-erase: enhanced is not crypto erase", Target{Disk: sda, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicyCryptoErase}, nil, "ata-enhanced-erase: weaker than policy crypto-erase"},
		{"psid-revert with fallback on a plain SATA disk", Target{Disk: sda, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicyPSIDRevert, AllowWeakerFallback: true}, []Method{MethodATAEnhanced, MethodATANormal}, ""},
		{"sata opal drive without PSID falls back to ATA", Target{Disk: sda, Opal: opal2(false, false), ATA: good},
			Policy{Method: PolicyPSIDRevert, AllowWeakerFallback: true}, []Method{MethodATAEnhanced, MethodATANormal}, ""},
		{"opal locking enabled blocks ATA erase", Target{Disk: sda, Opal: opal2(true, false), ATA: good},
			Policy{Method: PolicyFormat}, nil, "ata-security-erase: Opal locking is enabled"},
		{"frozen by the BIOS", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.Frozen = true })},
			Policy{Method: PolicyFormat}, nil, "security is frozen (word 128 bit 3): the BIOS froze the drive with SECURITY FREEZE LOCK at boot; " +
				"a suspend/resume cycle or hot-plugging the drive unfreezes it, and CURE does not do that automatically"},
		{"password already set", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.Enabled = true })},
			Policy{Method: PolicyFormat}, nil, "word 128 0x0023: security is enabled (word 128 bit 1): a user password CURE does not know"},
		{"locked", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.Enabled, d.Locked = true, true })},
			Policy{Method: PolicyFormat}, nil, "security is locked (word 128 bit 2)"},
		{"count expired", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.Enabled, d.CountExpired = true, true })},
			Policy{Method: PolicyFormat}, nil, "security is enabled"},
		{"no security feature set", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.NoSecurity = true })},
			Policy{Method: PolicyFormat}, nil, "IDENTIFY word 82 0x4020, word 128 0x0000: the drive does not support the Security feature set"},
		{"no enhanced erase", Target{Disk: sda, OpalErr: noTCG, ATA: sataID(t, func(d *atafake.Drive) { d.NoEnhanced = true })},
			Policy{Method: PolicySanitize}, nil, "no enhanced erase (word 128 bit 5 clear)"},
		{"IDENTIFY failed", Target{Disk: sda, OpalErr: noTCG, ATAErr: fmt.Errorf("probe sda: %w", ata.ErrUnsupported)},
			Policy{Method: PolicyFormat}, nil, "no IDENTIFY DEVICE data (probe sda: ATA pass-through not supported)"},
		{"sas disk: ATA erase needs SATA", Target{Disk: blockdev.Disk{Name: "sdb", Serial: "X", Transport: "sas"}, OpalErr: noTCG, ATA: good},
			Policy{Method: PolicyFormat}, nil, "transport sas: ATA security erase needs a SATA disk"},
	}
	runPlanCases(t, cases, func(t *testing.T, _ planCase, p Plan) {
		if !strings.Contains(p.Reason, "SECURITY ERASE UNIT, drive estimates") || !strings.Contains(p.Reason, "SEC1") {
			t.Errorf("reason %q", p.Reason)
		}
	})
	// The reason carries the drive's estimate for the chosen mode.
	p, err := PlanWipe(Target{Disk: sda, OpalErr: noTCG, ATA: good}, Policy{Method: PolicyFormat})
	if err != nil || !strings.HasSuffix(p.Reason, "normal SECURITY ERASE UNIT, drive estimates 6 min") {
		t.Errorf("reason %q err %v", p.Reason, err)
	}
}

func TestPlanNVMeIgnoresATA(t *testing.T) {
	// Fallback rules for NVMe are unchanged: the ATA methods are listed as
	// rejected, never planned, even when handed IDENTIFY data.
	p, err := PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S1"), OpalErr: noTCG, NVMe: qemuNVMe(), ATA: sataID(t, nil)},
		Policy{Method: PolicySanitize, AllowWeakerFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(methods(p)) != fmt.Sprint([]Method{MethodFormatUserData}) {
		t.Errorf("steps %v", methods(p))
	}
	rej := strings.Join(p.Rejected, "\n")
	for _, want := range []string{"ata-enhanced-erase: transport nvme: ATA security erase needs a SATA disk", "ata-security-erase: transport nvme"} {
		if !strings.Contains(rej, want) {
			t.Errorf("rejected lacks %q:\n%s", want, rej)
		}
	}
}

func TestMethodClasses(t *testing.T) {
	// Enhanced erase is sanitize, not crypto-erase: ACS-3 promises an
	// overwrite including reallocated sectors, not a key change.
	if MethodATAEnhanced.Class() != PolicySanitize || MethodATANormal.Class() != PolicyFormat {
		t.Errorf("classes %s %s", MethodATAEnhanced.Class(), MethodATANormal.Class())
	}
	for i := 1; i < len(methodOrder); i++ {
		if Strength(methodOrder[i-1].Class()) < Strength(methodOrder[i].Class()) {
			t.Errorf("methodOrder: %s before stronger %s", methodOrder[i-1], methodOrder[i])
		}
	}
}

func TestPlanNone(t *testing.T) {
	p, err := PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S")}, Policy{Method: PolicyNone})
	if err != nil || p.Method != MethodNone {
		t.Fatalf("plan %+v err %v", p, err)
	}
}

func TestStrengthOrder(t *testing.T) {
	order := []string{PolicyPSIDRevert, PolicyRevertSID, PolicyCryptoErase, PolicySanitize, PolicyFormat}
	for i := 1; i < len(order); i++ {
		if Strength(order[i-1]) <= Strength(order[i]) {
			t.Errorf("%s must be stronger than %s", order[i-1], order[i])
		}
	}
	if Strength(PolicyNone) != 0 {
		t.Error("none has strength")
	}
}
