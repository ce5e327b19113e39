package bluefield

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

	"github.com/cure-oss/cure/tools/mstflint"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseMisc(t *testing.T) {
	m, err := ParseMisc(fixture(t, "misc_basic.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if m.BootMode != 1 || m.DevName != "pcie-0000:a3:00.2" || m.DevInfo != "BlueField-3(Rev 1)" || m.Fields["SW_RESET"] != "0" || len(m.Log) != 0 {
		t.Errorf("%+v", m)
	}
	if m.PCI() != "0000:a3:00.0" {
		t.Errorf("PCI = %q", m.PCI())
	}
	m, err = ParseMisc(fixture(t, "misc_log_ready.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Log) != 21 || m.Log[0] != "INFO[BL2]: start" || m.Log[20] != "INFO[MISC]: DPU is ready" {
		t.Errorf("log = %q", m.Log)
	}
	if s, _ := LogState(m.Log); s != StateReady {
		t.Errorf("state = %v", s)
	}
	if _, err := ParseMisc([]byte("\n\n")); err == nil {
		t.Error("empty misc accepted")
	}
	if _, err := ParseMisc([]byte("BOOT_MODE x (0:rshim)\n")); err == nil || !strings.Contains(err.Error(), `BOOT_MODE "x"`) {
		t.Errorf("err = %v", err)
	}
	usb := &Misc{DevName: "usb-3.3"}
	if usb.PCI() != "" {
		t.Errorf("usb PCI = %q", usb.PCI())
	}
}

func TestLogState(t *testing.T) {
	for _, tc := range []struct {
		lines   []string
		want    State
		failure string
	}{
		{nil, StateUnknown, ""},
		{[]string{"INFO[BL2]: start"}, StateBooting, ""},
		{[]string{"INFO[BL2]: start", "INFO[MISC]: Ubuntu installation started"}, StateInstalling, ""},
		{[]string{"INFO[MISC]: Ubuntu installation completed", "INFO[MISC]: NIC firmware update failed", "INFO[MISC]: Linux up", "INFO[MISC]: DPU is ready"}, StateFailed, "INFO[MISC]: NIC firmware update failed"},
		{[]string{"ERR[BL2]: DDR POST failed"}, StateFailed, "ERR[BL2]: DDR POST failed"},
	} {
		s, f := LogState(tc.lines)
		if s != tc.want || f != tc.failure {
			t.Errorf("%q: %v %q, want %v %q", tc.lines, s, f, tc.want, tc.failure)
		}
	}
}

func TestParseVersions(t *testing.T) {
	v := ParseVersions(fixture(t, "bfver.txt"))
	want := Versions{ATF: "v2.2(release):4.9.1-21-gfc25b08d9", UEFI: "4.9.1-36-g0c3239837a", BSP: "4.9.1.13442", OSRelease: "bf-bundle-2.9.1-40_24.11-ubuntu-22.04_prod"}
	if v != want {
		t.Errorf("%+v", v)
	}
}

// fakeRshim models the misc file (fields + boot log) and the boot stream:
// a valid BFB closed on boot, or SW_RESET 1, restarts the log, and each
// read then reveals the next line of script.
type fakeRshim struct {
	t        *testing.T
	mu       sync.Mutex
	fields   string   // misc_basic.txt with DISPLAY_LEVEL rewritten
	level    string   // DISPLAY_LEVEL
	log      []string // current boot log
	script   []string // lines the next boot reveals, one per read
	appendLg bool     // keep the old log on reset instead of clearing it
	boot     bytes.Buffer
	writes   []string
	resets   int
}

func newFake(t *testing.T, script []string) *fakeRshim {
	f := &fakeRshim{t: t, fields: string(fixture(t, "misc_basic.txt")), level: "0", script: script}
	m, _ := ParseMisc(fixture(t, "misc_log_ready.txt"))
	f.log = m.Log // the previous boot ended ready: stale markers to ignore
	return f
}

func (f *fakeRshim) Name() string { return "/dev/rshim0" }

func (f *fakeRshim) ReadMisc() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resets > 0 && len(f.script) > 0 {
		f.log = append(f.log, f.script[0])
		f.script = f.script[1:]
	}
	out := strings.Replace(f.fields, "DISPLAY_LEVEL   0", "DISPLAY_LEVEL   "+f.level, 1)
	if f.level == "2" {
		out += " ---------------------------------------\n             Log Messages\n ---------------------------------------\n"
		for _, l := range f.log {
			out += " " + l + "\n"
		}
	}
	return []byte(out), nil
}

func (f *fakeRshim) restart() {
	f.resets++
	if !f.appendLg {
		f.log = nil
	}
}

func (f *fakeRshim) WriteMisc(cmd string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, cmd)
	k, v, _ := strings.Cut(cmd, " ")
	switch k {
	case "DISPLAY_LEVEL":
		f.level = v
	case "SW_RESET":
		if v == "1" {
			f.restart()
		}
	default:
		return fmt.Errorf("rshim misc %q: invalid argument", cmd)
	}
	return nil
}

type bootWriter struct{ f *fakeRshim }

func (w bootWriter) Write(p []byte) (int, error) { return w.f.boot.Write(p) }
func (w bootWriter) Close() error {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	if b := w.f.boot.Bytes(); len(b) >= 4 && binary.LittleEndian.Uint32(b) == bfbMagic {
		w.f.restart()
	}
	return nil
}

func (f *fakeRshim) OpenBoot() (io.WriteCloser, error) { return bootWriter{f}, nil }

func bfb(size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b, bfbMagic)
	for i := 4; i < size; i++ {
		b[i] = byte(i)
	}
	return b
}

func lines(t *testing.T, name string) []string {
	return strings.Split(strings.TrimSpace(string(fixture(t, name))), "\n")
}

func TestInstall(t *testing.T) {
	for _, appendLog := range []bool{false, true} {
		t.Run(fmt.Sprintf("append=%v", appendLog), func(t *testing.T) {
			f := newFake(t, lines(t, "install_log.txt"))
			f.appendLg = appendLog
			img := bfb(3<<20 + 17)
			var last int64
			got, err := Install(context.Background(), f, bytes.NewReader(img), int64(len(img)), func(w, total int64) {
				if w <= last || total != int64(len(img)) {
					t.Errorf("progress %d/%d after %d", w, total, last)
				}
				last = w
			}, WaitOptions{Poll: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f.boot.Bytes(), img) || last != int64(len(img)) {
				t.Errorf("boot got %d bytes, progress %d", f.boot.Len(), last)
			}
			// The stale "DPU is ready" of the previous boot must not count:
			// the lines returned are the new boot's, through its own marker.
			if len(got) != 21 || got[0] != "INFO[BL2]: start" || got[1] != "INFO[BL2]: boot mode (rshim)" || got[20] != "INFO[MISC]: DPU is ready" {
				t.Errorf("log = %q", got)
			}
			if f.writes[0] != "DISPLAY_LEVEL 2" {
				t.Errorf("writes = %q", f.writes)
			}
		})
	}
}

func TestInstallFailures(t *testing.T) {
	t.Run("not a bfb", func(t *testing.T) {
		f := newFake(t, nil)
		_, err := Install(context.Background(), f, strings.NewReader("MZ\x90\x00 a PE file"), -1, nil, WaitOptions{Poll: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "not a BFB image") || f.boot.Len() != 0 {
			t.Fatalf("err = %v, boot %d bytes", err, f.boot.Len())
		}
	})
	t.Run("installer reports failure", func(t *testing.T) {
		script := lines(t, "install_log.txt")
		script[17] = "INFO[MISC]: NIC firmware update failed"
		f := newFake(t, script)
		img := bfb(4096)
		_, err := Install(context.Background(), f, bytes.NewReader(img), int64(len(img)), nil, WaitOptions{Poll: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), `boot log reports "INFO[MISC]: NIC firmware update failed"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("never ready", func(t *testing.T) {
		f := newFake(t, []string{"INFO[BL2]: start", "INFO[BL31]: start"})
		img := bfb(4096)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		_, err := Install(ctx, f, bytes.NewReader(img), int64(len(img)), nil, WaitOptions{Poll: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "not ready (state booting) before context deadline exceeded") {
			t.Fatalf("err = %v", err)
		}
		if err == nil || !strings.Contains(err.Error(), "INFO[BL31]: start") {
			t.Errorf("err lacks the log tail: %v", err)
		}
	})
	t.Run("short stream", func(t *testing.T) {
		f := newFake(t, lines(t, "install_log.txt"))
		img := bfb(4096)
		_, err := Install(context.Background(), f, bytes.NewReader(img), 8192, nil, WaitOptions{Poll: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "wrote 4096 bytes, expected 8192") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestReset(t *testing.T) {
	// A plain reboot logs the same lines as the previous boot: with an
	// appending log, only lines after the old ones count.
	m, _ := ParseMisc(fixture(t, "misc_log_ready.txt"))
	for _, appendLog := range []bool{false, true} {
		f := newFake(t, m.Log)
		f.appendLg = appendLog
		got, err := Reset(context.Background(), f, WaitOptions{Poll: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if f.resets != 1 || len(got) != len(m.Log) || strings.Join(f.writes, ",") != "DISPLAY_LEVEL 2,SW_RESET 1" {
			t.Errorf("append=%v: resets %d, %d new lines, writes %q", appendLog, f.resets, len(got), f.writes)
		}
	}
}

type fakeNIC struct{ q *mstflint.Query }

func (n fakeNIC) QueryDevice(ctx context.Context, pci string) (*mstflint.Query, error) {
	if pci != "0000:a3:00.0" {
		return nil, fmt.Errorf("unexpected pci %s", pci)
	}
	return n.q, nil
}

func TestQueryAndPlan(t *testing.T) {
	f := newFake(t, nil)
	f.level = "2"
	nic := fakeNIC{q: &mstflint.Query{FWVersion: "32.41.1000", PSID: "MT_0000000884"}}
	st, err := Query(context.Background(), f, nic)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateReady || st.NIC.Running() != "32.41.1000" || st.Misc.BootMode != 1 {
		t.Fatalf("%+v", st)
	}
	p, err := PlanInstall("/dev/rshim0", st, Want{NICFW: "32.41.1000"})
	if err != nil || p.Install {
		t.Errorf("match: %v %+v", err, p)
	}
	p, _ = PlanInstall("/dev/rshim0", st, Want{NICFW: "32.43.1014"})
	if !p.Install || !strings.Contains(p.Reasons[0], "NIC firmware 32.41.1000, want 32.43.1014") {
		t.Errorf("drift: %+v", p)
	}
	p, _ = PlanInstall("/dev/rshim0", st, Want{NICFW: "32.41.1000", BSP: "4.9.1.13442"})
	if !p.Install || !strings.Contains(strings.Join(p.Reasons, ";"), "BSP not observable") {
		t.Errorf("unobservable BSP: %+v", p)
	}
	if _, err := PlanInstall("/dev/rshim0", st, Want{}); err == nil {
		t.Error("empty want accepted")
	}
}

func TestOpenAbsentIsSkip(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "rshim0"))
	if !mstflint.IsSkip(err) || !strings.Contains(err.Error(), "no rshim device") {
		t.Fatalf("err = %v", err)
	}
	// The real Dev over plain files: misc read/write and the boot stream.
	dir := filepath.Join(t.TempDir(), "rshim0")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "misc"), fixture(t, "misc_basic.txt"), 0o644)
	os.WriteFile(filepath.Join(dir, "boot"), nil, 0o644)
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if found, _ := Find(filepath.Dir(dir)); len(found) != 1 || found[0] != dir {
		t.Errorf("Find = %q", found)
	}
	if err := d.WriteMisc("SW_RESET 1"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "misc"))
	if !strings.HasPrefix(string(b), "SW_RESET 1\n") {
		t.Errorf("misc after write = %q", b[:20])
	}
}

func TestOpenAll(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "rshim0")
	os.MkdirAll(dir, 0o755)
	os.MkdirAll(filepath.Join(root, "rshim1"), 0o755) // no misc: not a live rshim
	os.WriteFile(filepath.Join(dir, "misc"), fixture(t, "misc_basic.txt"), 0o644)
	rs, err := OpenAll(root)
	if err != nil || len(rs) != 1 || rs[0].Name() != dir {
		t.Fatalf("OpenAll = %v, %v; want %s only", rs, err, dir)
	}
	if rs, err := OpenAll(filepath.Join(root, "none")); err != nil || len(rs) != 0 {
		t.Errorf("no /dev: %v, %v", rs, err)
	}
}
