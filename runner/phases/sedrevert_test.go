package phases

import (
	"context"
	"errors"
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
	t.Run("read-only modes never wipe", func(t *testing.T) {
		calls = nil
		for _, m := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY, curev1.Mode_MODE_DIAGNOSTIC, curev1.Mode_MODE_BURNIN} {
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
