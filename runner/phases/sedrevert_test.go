package phases

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/wipe"
)

// withoutWipe drops the example's own wipe section.
func withoutWipe(t *testing.T) string {
	t.Helper()
	return regexp.MustCompile(`(?ms)^  # QEMU's NVMe has no Opal.*?^  wipe:\n(    .*\n|      .*\n)*`).ReplaceAllString(string(manifest(t)), "")
}

func wipeManifest(t *testing.T, policy, selector string) []byte {
	t.Helper()
	y := withoutWipe(t) + "  wipe:\n    policy: " + policy + "\n    disks:\n      " + selector + "\n"
	return []byte(y)
}

type wipeCall struct {
	disk  string
	batch []string
	p     wipe.Policy
	cred  wipe.Credentials
}

func TestSEDRevertPhase(t *testing.T) {
	disks := []blockdev.Disk{
		{Name: "nvme0n1", Path: "/dev/nvme0n1", Transport: "nvme", Model: "QEMU NVMe Ctrl", Serial: "S0", SizeBytes: 1 << 30},
		{Name: "nvme1n1", Path: "/dev/nvme1n1", Transport: "nvme", Model: "QEMU NVMe Ctrl", Serial: "S1", SizeBytes: 1 << 30},
		{Name: "sda", Path: "/dev/sda", Transport: "usb", Model: "Boot Stick", Serial: "B0", SizeBytes: 8 << 30, BootMedium: true},
	}
	var calls []wipeCall
	fail := ""
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks, nil },
		Wipe: func(_ context.Context, d blockdev.Disk, batch []string, p wipe.Policy, c wipe.Credentials) (*wipe.Result, error) {
			calls = append(calls, wipeCall{d.Name, batch, p, c})
			res := &wipe.Result{Disk: d.Name, Method: wipe.MethodPSIDRevert, Erase: 1500 * time.Millisecond, Verified: true, Evidence: []string{"marker gone at 18 regions"}}
			if d.Name == fail {
				return res, errors.New("verification failed: marker still at offset 0")
			}
			return res, nil
		}})

	t.Run("erases every selected disk with its PSID", func(t *testing.T) {
		calls = nil
		a := assignment(t, curev1.Mode_MODE_PROVISION, wipeManifest(t, "psid-revert", `transport: nvme`))
		a.Psids = map[string]string{"S0": "PSID-ZERO", "S1": "PSID-ONE"}
		em := &recEmitter{}
		out := e.Run(context.Background(), "sed_revert", a, em)
		if out.Status != curev1.PhaseStatus_PHASE_OK {
			t.Fatalf("outcome %+v", out)
		}
		if len(calls) != 2 || calls[0].cred.PSID != "PSID-ZERO" || calls[1].cred.PSID != "PSID-ONE" || calls[0].p.Method != "psid-revert" {
			t.Fatalf("calls %+v", calls)
		}
		if strings.Join(calls[0].batch, ",") != "nvme0n1,nvme1n1" {
			t.Errorf("batch %v", calls[0].batch)
		}
		if len(em.verdicts) != 2 || em.verdicts[0].Component != "disk/nvme0n1" || em.verdicts[0].Status != curev1.VerdictStatus_PASS ||
			!strings.Contains(em.verdicts[0].Observed, "opal-psid-revert") {
			t.Errorf("verdicts %v", em.verdicts)
		}
	})
	t.Run("a failed verification fails the phase naming the disk", func(t *testing.T) {
		calls, fail = nil, "nvme1n1"
		defer func() { fail = "" }()
		em := &recEmitter{}
		out := e.Run(context.Background(), "sed_revert", assignment(t, curev1.Mode_MODE_PROVISION, wipeManifest(t, "format", `transport: nvme`)), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "nvme1n1: verification failed") {
			t.Fatalf("outcome %+v", out)
		}
		if em.verdicts[1].Status != curev1.VerdictStatus_FAIL {
			t.Errorf("verdicts %v", em.verdicts)
		}
	})
	t.Run("the boot medium is refused before any disk is touched", func(t *testing.T) {
		calls = nil
		out := e.Run(context.Background(), "sed_revert", assignment(t, curev1.Mode_MODE_PROVISION, wipeManifest(t, "format", `serial: B0`)), &recEmitter{})
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || len(calls) != 0 {
			t.Fatalf("outcome %+v, %d wipes", out, len(calls))
		}
	})
	t.Run("read-only modes and service never wipe", func(t *testing.T) {
		calls = nil
		for _, m := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY, curev1.Mode_MODE_DIAGNOSTIC, curev1.Mode_MODE_BURNIN, curev1.Mode_MODE_SERVICE} {
			out := e.Run(context.Background(), "sed_revert", assignment(t, m, wipeManifest(t, "format", `transport: nvme`)), &recEmitter{})
			if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "refused") {
				t.Errorf("%s: outcome %+v", m, out)
			}
		}
		if len(calls) != 0 {
			t.Fatalf("a read-only mode reached the wiper: %+v", calls)
		}
	})
	t.Run("no wipe policy skips", func(t *testing.T) {
		y := withoutWipe(t)
		if strings.Contains(y, "wipe:") {
			t.Fatalf("example still has a wipe section:\n%s", y)
		}
		out := e.Run(context.Background(), "sed_revert", assignment(t, curev1.Mode_MODE_PROVISION, []byte(y)), &recEmitter{})
		if out.Status != curev1.PhaseStatus_PHASE_SKIPPED {
			t.Fatalf("outcome %+v", out)
		}
	})
}

// A disk erased in this boot whose samples read zeros is installed with
// zero blocks skipped; if the read-back then disagrees, the image is
// written again with zeroing, never accepted.
func TestInstallAfterZeroingWipe(t *testing.T) {
	d := blockdev.Disk{Name: "nvme0n1", Path: "/dev/nvme0n1", SizeBytes: 1 << 30, Model: "QEMU NVMe Ctrl", Serial: "deadbeef", Transport: "nvme"}
	disks := []blockdev.Disk{d, {Name: "sda", Path: "/dev/sda", SizeBytes: 1 << 30, Transport: "sata", BootMedium: true}}
	for _, c := range []struct {
		name       string
		readsZeros bool
		verifyErrs []error
		wantZeroed []bool // TargetZeroed of each write
		wantOK     bool
	}{
		{"erased to zeros: zero blocks skipped", true, nil, []bool{true}, true},
		{"erased to noise (crypto erase): zeros written", false, nil, []bool{false}, true},
		{"hint wrong: rewritten with zeroing", true, []error{errors.New("read-back differs in 3 grains")}, []bool{true, false}, true},
		{"rewrite also fails: phase fails", true, []error{errors.New("differs"), errors.New("differs again")}, []bool{true, false}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := &fakeImages{verifyErrs: c.verifyErrs}
			e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks, nil }, Images: img, Seeds: &fakeSeeds{},
				SystemSerial: "SN1", SeedWait: time.Hour,
				Wipe: func(_ context.Context, d blockdev.Disk, _ []string, _ wipe.Policy, _ wipe.Credentials) (*wipe.Result, error) {
					return &wipe.Result{Disk: d.Name, Method: wipe.MethodFormatUserData, Verified: true, ReadsZeros: c.readsZeros}, nil
				}})
			a := assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)) // wipe: format on the QEMU NVMe
			if out := e.Run(context.Background(), "sed_revert", a, &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_OK {
				t.Fatalf("sed_revert %+v", out)
			}
			out := e.Run(context.Background(), "os_install", a, &recEmitter{})
			if (out.Status == curev1.PhaseStatus_PHASE_OK) != c.wantOK {
				t.Fatalf("os_install %+v", out)
			}
			var got []bool
			for _, w := range img.writes {
				got = append(got, w.TargetZeroed)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.wantZeroed) {
				t.Errorf("TargetZeroed per write %v, want %v", got, c.wantZeroed)
			}
			if len(img.verified) != len(c.wantZeroed) {
				t.Errorf("%d read-backs for %d writes", len(img.verified), len(c.wantZeroed))
			}
		})
	}
	// Without a wipe in this boot (a fresh runner after a reboot), nothing
	// is assumed.
	img := &fakeImages{}
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks, nil }, Images: img, Seeds: &fakeSeeds{}, SystemSerial: "SN1", SeedWait: time.Hour})
	if out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_OK || img.writes[0].TargetZeroed {
		t.Errorf("fresh runner: %+v, TargetZeroed %v", out, img.writes[0].TargetZeroed)
	}
}
