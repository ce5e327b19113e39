package wipe

import (
	"fmt"
	"strings"
	"testing"

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

func TestPlanWipe(t *testing.T) {
	d := nvmeDisk("nvme0n1", "S1")
	cases := []struct {
		name   string
		t      Target
		p      Policy
		want   []Method // nil: refusal
		errHas string
	}{
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
		{"sata without opal", Target{Disk: blockdev.Disk{Name: "sda", Serial: "W1", Transport: "sata"}, OpalErr: noTCG},
			Policy{Method: PolicyFormat, AllowWeakerFallback: true}, nil, "no ATA security erase"},
		{"sata opal psid", Target{Disk: blockdev.Disk{Name: "sda", Serial: "W1", Transport: "sata"}, Opal: opal2(false, false), PSIDKnown: true},
			Policy{Method: PolicyPSIDRevert}, []Method{MethodPSIDRevert}, ""},
		{"boot medium", Target{Disk: blockdev.Disk{Name: "sda", Serial: "W1", BootMedium: true}, OpalErr: noTCG},
			Policy{Method: PolicyFormat}, nil, "medium CURE booted from"},
		{"unknown policy", Target{Disk: d, OpalErr: noTCG}, Policy{Method: "shred"}, nil, `unknown wipe policy "shred"`},
	}
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
