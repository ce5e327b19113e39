package phases

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/bluefield"
	"github.com/cure-oss/cure/tools/mstflint"
)

const dpuMisc = `DISPLAY_LEVEL   %s (0:basic, 1:advanced, 2:log)
BOOT_MODE       1 (0:rshim, 1:emmc, 2:emmc-boot-swap)
BOOT_TIMEOUT    150 (seconds)
DROP_MODE       0 (0:normal, 1:drop)
SW_RESET        0 (1: reset)
DEV_NAME        pcie-0000:a3:00.2
DEV_INFO        BlueField-3(Rev 1)
OPN_STR         900-9D3B6-00CV-AA0
UP_TIME         86423(s)
`

var dpuInstallLog = []string{
	"INFO[BL2]: start", "INFO[BL2]: boot mode (rshim)", "INFO[BL31]: start", "INFO[UEFI]: exit Boot Service",
	"INFO[MISC]: Ubuntu installation started", "INFO[MISC]: Updating NIC firmware...", "INFO[MISC]: NIC firmware update done",
	"INFO[MISC]: Installation finished", "INFO[MISC]: Linux up", "INFO[MISC]: DPU is ready",
}

// fakeDPU models /dev/rshim0: misc fields and boot log (shown at
// DISPLAY_LEVEL 2) and the boot stream. A BFB closed on boot restarts the
// log; each later read reveals one line of script; installed runs once.
type fakeDPU struct {
	mu        sync.Mutex
	level     string
	log       []string
	script    []string
	boot      bytes.Buffer
	writes    []string
	installed func()
	booted    bool
}

func (f *fakeDPU) Name() string { return "/dev/rshim0" }

func (f *fakeDPU) ReadMisc() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.booted && len(f.script) > 0 {
		f.log = append(f.log, f.script[0])
		f.script = f.script[1:]
		if len(f.script) == 0 && f.installed != nil {
			f.installed()
		}
	}
	out := fmt.Sprintf(dpuMisc, f.level)
	if f.level == "2" {
		out += " ---------------------------------------\n             Log Messages\n ---------------------------------------\n"
		for _, l := range f.log {
			out += " " + l + "\n"
		}
	}
	return []byte(out), nil
}

func (f *fakeDPU) WriteMisc(cmd string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, cmd)
	if v, ok := strings.CutPrefix(cmd, "DISPLAY_LEVEL "); ok {
		f.level = v
		return nil
	}
	return fmt.Errorf("rshim misc %q: invalid argument", cmd)
}

type fakeBoot struct{ f *fakeDPU }

func (b fakeBoot) Write(p []byte) (int, error) { return b.f.boot.Write(p) }
func (b fakeBoot) Close() error {
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	if x := b.f.boot.Bytes(); len(x) >= 4 && binary.LittleEndian.Uint32(x) == 0x13026642 {
		b.f.booted, b.f.log = true, nil
	}
	return nil
}

func (f *fakeDPU) OpenBoot() (io.WriteCloser, error) { return fakeBoot{f}, nil }

func bfbImage(n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, 0x13026642) // "Bf\x02\x13"
	for i := 4; i < n; i++ {
		b[i] = byte(i * 7)
	}
	return b
}

// dpuNode is a node with one BlueField-3 whose NIC (0000:a3:00.0) runs nicFW.
func dpuNode(t *testing.T, nicFW string, tools ...string) (Config, *fakeDPU, *fakeMFT, string) {
	d := &fakeDPU{level: "0", script: append([]string(nil), dpuInstallLog...)}
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:a3:00.0": {nicFW, nicFW, "MT_0000000884"}}}
	if tools == nil {
		tools = []string{"mstflint", "mstfwreset"}
	}
	tmp := t.TempDir()
	return Config{Log: quiet(), Root: t.TempDir(), TmpDir: tmp, DPUPoll: time.Millisecond,
		MFT:    &mstflint.Tool{Runner: f, LookPath: lookPath(tools...), Log: quiet()},
		Rshims: func() ([]bluefield.Rshim, error) { return []bluefield.Rshim{d}, nil },
	}, d, f, tmp
}

func dpuEntry(match, version, activation string, image []byte) string {
	e := nicEntry("X", version, "equal", activation, image)
	e = strings.Replace(e, "name: cx7-fabric", "name: bf3-frontend", 1)
	e = strings.Replace(e, "component: nic", "component: dpu", 1)
	e = strings.Replace(e, "format: bin", "format: bfb", 1)
	return strings.Replace(e, "        psid: X\n", match, 1)
}

const bf3PSID = "        psid: MT_0000000884\n"

func runDPU(t *testing.T, cfg Config, mode curev1.Mode, entry string, base string) (agentOutcome, *recEmitter) {
	em := &recEmitter{}
	a := assignment(t, mode, nicManifest(entry))
	a.ArtifactBaseUrl = base
	out := New(cfg).Run(context.Background(), "dpu", a, em)
	return agentOutcome{out.Status, out.Message, out.RebootRequired}, em
}

type agentOutcome struct {
	status  curev1.PhaseStatus
	message string
	reboot  bool
}

func TestDPUMatchIsSkippedAndNeverWrites(t *testing.T) {
	cfg, d, f, _ := dpuNode(t, "32.43.1014")
	out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", bfbImage(64)), "")
	if out.status != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(out.message, "all 1 pinned DPU(s) match") {
		t.Fatalf("outcome %+v", out)
	}
	v := em.verdicts[0]
	if len(em.verdicts) != 1 || v.Component != "dpu/rshim0" || v.Status != curev1.VerdictStatus_MATCH || v.Observed != "32.43.1014" ||
		!strings.Contains(v.Message, "BlueField-3(Rev 1) 900-9D3B6-00CV-AA0 PSID MT_0000000884: DPU NIC firmware") {
		t.Errorf("verdicts %v", em.verdicts)
	}
	if len(d.writes) != 0 || d.boot.Len() != 0 || strings.Join(f.calls, ";") != "mstflint -d 0000:a3:00.0 query" {
		t.Errorf("writes %q boot %d calls %q", d.writes, d.boot.Len(), f.calls)
	}
}

func TestDPUDriftProvisionInstallsBundle(t *testing.T) {
	cfg, d, f, tmp := dpuNode(t, "32.41.1000")
	img := bfbImage(3<<20 + 5)
	srv, hits := serveCounted(t, img)
	// The bundle's installer burns and the Arm reset loads the NIC firmware.
	d.installed = func() { f.dev["0000:a3:00.0"].flash, f.dev["0000:a3:00.0"].running = "32.43.1014", "32.43.1014" }
	out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", img), srv.URL+"/artifacts/")
	if out.status != curev1.PhaseStatus_PHASE_OK || out.reboot || out.message != "installed dpu/rshim0" {
		t.Fatalf("outcome %+v", out)
	}
	if !bytes.Equal(d.boot.Bytes(), img) || hits.Load() != 1 || d.writes[0] != "DISPLAY_LEVEL 2" {
		t.Fatalf("boot got %d of %d bytes, downloads %d, writes %q", d.boot.Len(), len(img), hits.Load(), d.writes)
	}
	if len(em.verdicts) != 2 || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT || em.verdicts[0].Observed != "32.41.1000" ||
		em.verdicts[1].Check != "firmware_update" || em.verdicts[1].Status != curev1.VerdictStatus_PASS || em.verdicts[1].Observed != "32.43.1014" {
		t.Fatalf("verdicts %v", em.verdicts)
	}
	if n := len(em.metrics); n == 0 || em.metrics[n-1].Name != "dpu_install.written" || em.metrics[n-1].Value != float64(len(img)) {
		t.Errorf("metrics %v", em.metrics)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("bundle left in tmpfs: %v", left)
	}
}

func TestDPUNICActivation(t *testing.T) {
	for _, tc := range []struct {
		activation  string
		resetFails  bool
		wantStatus  curev1.VerdictStatus
		wantReboot  bool
		wantReset   bool
		wantMessage string
	}{
		{"mstfwreset", false, curev1.VerdictStatus_PASS, false, true, "bundle installed, DPU ready"},
		{"mstfwreset", true, curev1.VerdictStatus_DRIFT, true, true, "mstfwreset failed, reboot required"},
		{"host-reboot", false, curev1.VerdictStatus_DRIFT, true, false, "flash holds 32.43.1014, running 32.41.1000: activates at the next reboot"},
		{"none", false, curev1.VerdictStatus_DRIFT, false, false, "activation none"},
	} {
		t.Run(fmt.Sprintf("%s/resetFails=%v", tc.activation, tc.resetFails), func(t *testing.T) {
			cfg, d, f, _ := dpuNode(t, "32.41.1000")
			f.resetFails = tc.resetFails
			img := bfbImage(4096)
			srv, _ := serveCounted(t, img)
			// The installer burns the NIC firmware; it runs after a reset.
			d.installed = func() { f.dev["0000:a3:00.0"].flash = "32.43.1014" }
			out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", tc.activation, img), srv.URL+"/artifacts/")
			if out.status != curev1.PhaseStatus_PHASE_OK || out.reboot != tc.wantReboot {
				t.Fatalf("outcome %+v", out)
			}
			v := em.verdicts[len(em.verdicts)-1]
			if v.Status != tc.wantStatus || !strings.Contains(v.Message, tc.wantMessage) {
				t.Errorf("verdict %v", v)
			}
			if f.ran("mstfwreset") != tc.wantReset {
				t.Errorf("mstfwreset run = %v, want %v: %q", f.ran("mstfwreset"), tc.wantReset, f.calls)
			}
		})
	}
}

func TestDPUInstallFailureFails(t *testing.T) {
	cfg, d, _, _ := dpuNode(t, "32.41.1000")
	d.script[6] = "INFO[MISC]: NIC firmware update failed"
	img := bfbImage(4096)
	srv, _ := serveCounted(t, img)
	out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", img), srv.URL+"/artifacts/")
	if out.status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.message, `boot log reports "INFO[MISC]: NIC firmware update failed"`) {
		t.Fatalf("outcome %+v", out)
	}
	if v := em.verdicts[len(em.verdicts)-1]; v.Status != curev1.VerdictStatus_FAIL || v.Check != "firmware_update" {
		t.Errorf("verdict %v", v)
	}
}

func TestDPUNotABundleNeverReachesTheDPU(t *testing.T) {
	cfg, d, _, _ := dpuNode(t, "32.41.1000")
	img := []byte("MZ\x90\x00 a PE file, not a bfb")
	srv, _ := serveCounted(t, img)
	out, _ := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", img), srv.URL+"/artifacts/")
	if out.status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.message, "not a BFB image") || d.boot.Len() != 0 {
		t.Fatalf("outcome %+v, boot %d bytes", out, d.boot.Len())
	}
}

func TestDPUAuditAndVerifyNeverInstall(t *testing.T) {
	for _, mode := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY} {
		cfg, d, _, _ := dpuNode(t, "32.41.1000")
		img := bfbImage(4096)
		srv, hits := serveCounted(t, img)
		out, em := runDPU(t, cfg, mode, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", img), srv.URL+"/artifacts/")
		if out.status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.message, "1 drift") || !strings.Contains(out.message, "reported only in "+mode.String()) {
			t.Errorf("%s: outcome %+v", mode, out)
		}
		if len(d.writes) != 0 || d.boot.Len() != 0 || hits.Load() != 0 || len(em.verdicts) != 1 {
			t.Errorf("%s: writes %q boot %d downloads %d verdicts %v", mode, d.writes, d.boot.Len(), hits.Load(), em.verdicts)
		}
	}
}

func TestDPUSkips(t *testing.T) {
	entry := dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", bfbImage(64))
	cfg, _, _, _ := dpuNode(t, "32.41.1000")
	if out, _ := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, nicEntry("MT_0000000838", "28.43.2026", "equal", "mstfwreset", []byte("x")), ""); out.status != curev1.PhaseStatus_PHASE_SKIPPED ||
		!strings.Contains(out.message, "pins no dpu firmware") {
		t.Errorf("no dpu entries: %+v", out)
	}
	// QEMU: no /dev/rshim*.
	c := cfg
	c.Rshims = func() ([]bluefield.Rshim, error) { return bluefield.OpenAll(filepath.Join(c.Root, "dev")) }
	out, em := runDPU(t, c, curev1.Mode_MODE_PROVISION, entry, "")
	if out.status != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(out.message, "no BlueField rshim device under "+filepath.Join(c.Root, "dev/rshim*")) || len(em.verdicts) != 0 {
		t.Errorf("no rshim: %+v %v", out, em.verdicts)
	}
	c.Rshims = nil
	if out, _ := runDPU(t, c, curev1.Mode_MODE_PROVISION, entry, ""); out.status != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(out.message, "no rshim device source") {
		t.Errorf("nil source: %+v", out)
	}
}

func TestDPUPSIDUnreadableIsAnError(t *testing.T) {
	cfg, d, _, _ := dpuNode(t, "32.41.1000", "none")
	out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", bfbImage(64)), "")
	if out.status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.message, "cannot read the DPU's PSID") || !strings.Contains(out.message, "mstflint not found") {
		t.Fatalf("outcome %+v", out)
	}
	if em.verdicts[0].Status != curev1.VerdictStatus_ERROR || em.verdicts[0].Component != "dpu/rshim0" || d.boot.Len() != 0 {
		t.Errorf("verdicts %v boot %d", em.verdicts, d.boot.Len())
	}
}

func TestDPUBSPVersion(t *testing.T) {
	// A four-part version is the BSP: read from the rshim log when it
	// carries the line, otherwise not observable (DRIFT, never MATCH).
	entry := dpuEntry("        model: \"BlueField-3*\"\n", "4.9.1.13442", "dpu-reset", bfbImage(64))
	cfg, d, _, _ := dpuNode(t, "32.41.1000", "none")
	out, em := runDPU(t, cfg, curev1.Mode_MODE_AUDIT, entry, "")
	if out.status != curev1.PhaseStatus_PHASE_OK || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT ||
		!strings.Contains(em.verdicts[0].Message, "BlueField BSP version (no \"BlueField BSP version:\" line in the rshim log) not observable from the host; want 4.9.1.13442") {
		t.Fatalf("outcome %+v verdicts %v", out, em.verdicts)
	}
	d.level = "2"
	d.log = []string{"INFO[MISC]: BlueField BSP version: 4.9.1.13442", "INFO[MISC]: DPU is ready"}
	out, em = runDPU(t, cfg, curev1.Mode_MODE_AUDIT, entry, "")
	if out.status != curev1.PhaseStatus_PHASE_SKIPPED || em.verdicts[0].Status != curev1.VerdictStatus_MATCH || em.verdicts[0].Observed != "4.9.1.13442" {
		t.Fatalf("outcome %+v verdicts %v", out, em.verdicts)
	}
	if len(d.writes) != 0 {
		t.Errorf("audit wrote to misc: %q", d.writes)
	}
}

// A DPU whose NIC firmware reads as something the gate cannot order after
// the install is an ERROR naming the value, and fails the phase: not
// "installed", not "did not change".
func TestDPUGateErrorAfterInstall(t *testing.T) {
	cfg, d, f, _ := dpuNode(t, "32.41.1000")
	img := bfbImage(4096)
	srv, _ := serveCounted(t, img)
	d.installed = func() { f.dev["0000:a3:00.0"].flash, f.dev["0000:a3:00.0"].running = "32.43..1014", "32.43..1014" }
	out, em := runDPU(t, cfg, curev1.Mode_MODE_PROVISION, dpuEntry(bf3PSID, "32.43.1014", "dpu-reset", img), srv.URL+"/artifacts/")
	if out.status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.message, `"32.43..1014"`) {
		t.Fatalf("outcome %+v %v", out, em.verdicts)
	}
	v := em.verdicts[len(em.verdicts)-1]
	if v.Check != "firmware_update" || v.Status != curev1.VerdictStatus_ERROR || v.Observed != "32.43..1014" || !strings.Contains(v.Message, `running version "32.43..1014" cannot be judged`) {
		t.Errorf("verdict %v", v)
	}
}
