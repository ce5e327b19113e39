package mstflint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseQueryConnectX7(t *testing.T) {
	q, err := ParseQuery(fixture(t, "cx7_query.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if q.FWVersion != "28.39.1002" || q.Running() != "28.39.1002" || q.PendingReset() {
		t.Errorf("versions %q/%q pending %v", q.FWVersion, q.Running(), q.PendingReset())
	}
	if q.PSID != "MT_0000000838" || q.ProductVersion != "28.39.1002" || q.ImageType != "FS4" {
		t.Errorf("psid %q product %q type %q", q.PSID, q.ProductVersion, q.ImageType)
	}
	if q.BaseGUID != "b83fd20300a1b2c4" || q.BaseMAC != "b83fd2a1b2c4" || q.SecurityAttributes != "secure-fw" {
		t.Errorf("guid %q mac %q sec %q", q.BaseGUID, q.BaseMAC, q.SecurityAttributes)
	}
	want := []RomInfo{{Type: "UEFI", Version: "14.32.17", CPU: "AMD64,AARCH64"}, {Type: "PXE", Version: "3.7.300", CPU: "AMD64"}}
	if fmt.Sprint(q.RomInfo) != fmt.Sprint(want) {
		t.Errorf("rom info = %+v", q.RomInfo)
	}
}

func TestParseQueryBlueField3(t *testing.T) {
	q, err := ParseQuery(fixture(t, "bf3_query.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if q.FWVersion != "32.41.1000" || q.PSID != "MT_0000000884" || q.BaseMAC != "a088c2f1e2d4" {
		t.Errorf("%+v", q)
	}
	if len(q.RomInfo) != 4 || q.RomInfo[0].Type != "UEFI Virtio net" || q.RomInfo[0].Version != "21.4.13" || q.RomInfo[2].Type != "UEFI" {
		t.Errorf("rom info = %+v", q.RomInfo)
	}
}

func TestParseQueryPendingAndLegacy(t *testing.T) {
	q, err := ParseQuery(fixture(t, "cx7_pending_query.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if q.FWVersion != "28.43.2026" || q.Running() != "28.39.1002" || !q.PendingReset() {
		t.Errorf("flash %q running %q pending %v", q.FWVersion, q.Running(), q.PendingReset())
	}
	q, err = ParseQuery(fixture(t, "cx3_legacy_query.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if q.Running() != "2.40.5032" || q.DeviceID != "4103" || q.PSID != "MT_1090111019" || q.RomInfo[0].Type != "PXE" {
		t.Errorf("%+v", q)
	}
	img, err := ParseQuery(fixture(t, "cx7_image_query.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if img.BaseGUID != "" || img.FWVersion != "28.43.2026" {
		t.Errorf("image: guid %q (N/A must read as empty), version %q", img.BaseGUID, img.FWVersion)
	}
}

func TestParseQueryErrors(t *testing.T) {
	for in, want := range map[string]string{
		"-E- Cannot open Device: 0000:17:00.0. No such file or directory. MFE_CR_ERROR\n": `no "FW Version:" line`,
		"FW Version:            28.39.1002\n":                                             `no "PSID:" line`,
		"   type=PXE\nFW Version: 1\n":                                                    "line 1: continuation",
		"":                                                                                "(empty)",
	} {
		if _, err := ParseQuery([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", in, err, want)
		}
	}
}

func TestNormalizePCI(t *testing.T) {
	for in, want := range map[string]string{"17:00.0": "0000:17:00.0", "0000:A3:00.1": "0000:a3:00.1"} {
		if got, err := NormalizePCI(in); err != nil || got != want {
			t.Errorf("%q -> %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "/dev/mst/mt4129_pciconf0", "17:00", "17:00.8"} {
		if _, err := NormalizePCI(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// fakeMFT models one adapter's flash and running firmware behind the
// Runner seam, answering with output shaped like the fixtures.
type fakeMFT struct {
	t              *testing.T
	flash, running string
	psid           string
	images         map[string]string // image path -> fixture name
	resetFails     bool
	calls          []string
}

var fwLine = regexp.MustCompile(`(?m)^FW Version:.*\n(FW Version\(Running\):.*\n)?`)
var psidLine = regexp.MustCompile(`(?m)^PSID:.*$`)

func (f *fakeMFT) deviceQuery() []byte {
	out := string(fixture(f.t, "cx7_query.txt"))
	fw := fmt.Sprintf("FW Version:            %s\n", f.flash)
	if f.running != f.flash {
		fw += fmt.Sprintf("FW Version(Running):   %s\n", f.running)
	}
	out = fwLine.ReplaceAllString(out, fw)
	return []byte(psidLine.ReplaceAllString(out, "PSID:                  "+f.psid))
}

func (f *fakeMFT) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	line := name + " " + strings.Join(args, " ")
	f.calls = append(f.calls, line)
	exit := errors.New("exit status 1")
	switch {
	case name == "mstflint" && len(args) == 3 && args[0] == "-d" && args[2] == "query":
		return f.deviceQuery(), nil, nil
	case name == "mstflint" && len(args) == 3 && args[0] == "-i" && args[2] == "query":
		fx, ok := f.images[args[1]]
		if !ok {
			return []byte("-E- Cannot open " + args[1] + ": No such file or directory\n"), nil, exit
		}
		return fixture(f.t, fx), nil, nil
	case name == "mstflint" && len(args) == 6 && args[5] == "burn":
		q, _ := ParseQuery(fixture(f.t, f.images[args[3]]))
		f.flash = q.FWVersion
		return fixture(f.t, "burn_ok.txt"), nil, nil
	case name == "mstfwreset" && strings.Join(args[2:], " ") == "-y reset":
		if f.resetFails {
			return fixture(f.t, "mstfwreset_fail.txt"), nil, exit
		}
		f.running = f.flash
		return fixture(f.t, "mstfwreset_ok.txt"), nil, nil
	}
	f.t.Errorf("unexpected command %q", line)
	return nil, nil, exit
}

func newTool(t *testing.T, f *fakeMFT) *Tool {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices/0000:17:00.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Tool{Runner: f, SysRoot: root, LookPath: func(s string) (string, error) { return "/usr/bin/" + s, nil }}
}

func TestUpdateBurnAndReset(t *testing.T) {
	f := &fakeMFT{t: t, flash: "28.39.1002", running: "28.39.1002", psid: "MT_0000000838", images: map[string]string{"/tmp/cx7.bin": "cx7_image_query.txt"}}
	tool := newTool(t, f)
	p, r, err := tool.Update(context.Background(), "17:00.0", "/tmp/cx7.bin", "28.43.2026", ActivateReset)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Burn || !r.Burned || !r.Activated || r.RebootRequired || r.Final.Running() != "28.43.2026" {
		t.Fatalf("plan %+v result %+v", p, r)
	}
	want := []string{
		"mstflint -d 0000:17:00.0 query",
		"mstflint -i /tmp/cx7.bin query",
		"mstflint -d 0000:17:00.0 -i /tmp/cx7.bin -y burn",
		"mstflint -d 0000:17:00.0 query",
		"mstfwreset -d 0000:17:00.0 -y reset",
		"mstflint -d 0000:17:00.0 query",
	}
	if strings.Join(f.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	// Idempotent: nothing burnt or reset the second time.
	f.calls = nil
	p, _, err = tool.Update(context.Background(), "0000:17:00.0", "/tmp/cx7.bin", "28.43.2026", ActivateReset)
	if err != nil || !p.Noop() || len(f.calls) != 2 {
		t.Fatalf("second run: %v plan %+v calls %v", err, p, f.calls)
	}
}

func TestUpdateResetFailsMeansReboot(t *testing.T) {
	f := &fakeMFT{t: t, flash: "28.39.1002", running: "28.39.1002", psid: "MT_0000000838", resetFails: true, images: map[string]string{"/tmp/cx7.bin": "cx7_image_query.txt"}}
	tool := newTool(t, f)
	_, r, err := tool.Update(context.Background(), "17:00.0", "/tmp/cx7.bin", "", ActivateReset)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Burned || r.Activated || !r.RebootRequired || !strings.Contains(strings.Join(r.Notes, ""), "Reset level 3 is not supported") {
		t.Fatalf("result %+v", r)
	}
	// After the burn the flash holds the image: the next plan only activates.
	f.calls = nil
	p, r, err := tool.Update(context.Background(), "17:00.0", "/tmp/cx7.bin", "", ActivateReboot)
	if err != nil || p.Burn || !p.Activate || !r.RebootRequired {
		t.Fatalf("replan: %v %+v %+v", err, p, r)
	}
	for _, c := range f.calls {
		if strings.Contains(c, "burn") || strings.Contains(c, "mstfwreset") {
			t.Errorf("unexpected %q with ActivateReboot and a staged image", c)
		}
	}
}

func TestPSIDMismatchRefusedBeforeBurn(t *testing.T) {
	f := &fakeMFT{t: t, flash: "32.41.1000", running: "32.41.1000", psid: "MT_0000000884", images: map[string]string{"/tmp/cx7.bin": "cx7_image_query.txt"}}
	tool := newTool(t, f)
	_, _, err := tool.Update(context.Background(), "17:00.0", "/tmp/cx7.bin", "", ActivateReset)
	var pm *PSIDMismatchError
	if !errors.As(err, &pm) || pm.DevicePSID != "MT_0000000884" || pm.ImagePSID != "MT_0000000838" {
		t.Fatalf("err = %v", err)
	}
	for _, c := range f.calls {
		if strings.Contains(c, "burn") {
			t.Fatalf("burn issued despite PSID mismatch: %v", f.calls)
		}
	}
	// Apply refuses a hand-made plan with mismatching PSIDs, too.
	_, err = tool.Apply(context.Background(), &Plan{Device: "0000:17:00.0", Burn: true, Activate: true, DevicePSID: "A", ImagePSID: "B"}, "/tmp/x.bin", ActivateReset)
	if !errors.As(err, &pm) {
		t.Fatalf("apply: err = %v", err)
	}
}

func TestPlanWrongVersionAndSkips(t *testing.T) {
	dev, _ := ParseQuery(fixture(t, "cx7_query.txt"))
	img, _ := ParseQuery(fixture(t, "cx7_image_query.txt"))
	if _, err := PlanUpdate("0000:17:00.0", "/tmp/x.bin", dev, img, "28.44.1000"); err == nil || !strings.Contains(err.Error(), "carries FW 28.43.2026, the manifest wants 28.44.1000") {
		t.Errorf("err = %v", err)
	}
	tool := &Tool{LookPath: func(string) (string, error) {
		return "", errors.New(`exec: "mstflint": executable file not found in $PATH`)
	}}
	if err := tool.Available(); !IsSkip(err) || !strings.Contains(err.Error(), "mstflint not found") {
		t.Errorf("tool absent: %v", err)
	}
	tool = newTool(t, &fakeMFT{t: t})
	_, _, err := tool.Update(context.Background(), "0000:b1:00.0", "/tmp/x.bin", "", ActivateReset)
	if !IsSkip(err) || !strings.Contains(err.Error(), "no PCI device 0000:b1:00.0") {
		t.Errorf("device absent: %v", err)
	}
}

func TestQueryCommandFailureCarriesOutput(t *testing.T) {
	f := &fakeMFT{t: t, flash: "1", running: "1", psid: "X", images: map[string]string{}}
	_, err := newTool(t, f).QueryImage(context.Background(), "/tmp/missing.bin")
	if err == nil || !strings.Contains(err.Error(), "-E- Cannot open /tmp/missing.bin") {
		t.Fatalf("err = %v", err)
	}
}

func TestExecRunner(t *testing.T) {
	out, errb, err := ExecRunner{}.Run(context.Background(), "/bin/sh", "-c", "echo 'FW Version: 1'; echo '-E- boom' >&2; exit 3")
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || string(out) != "FW Version: 1\n" || string(errb) != "-E- boom\n" {
		t.Fatalf("out %q err %q: %v", out, errb, err)
	}
}

func TestNewResolvesAbsolutePaths(t *testing.T) {
	if p := resolve("sh"); !filepath.IsAbs(p) {
		t.Errorf("sh resolved to %q, want an absolute path", p)
	}
	// Absent: the bare name, so Available reports it by name.
	tool := New("/", nil)
	tool.Mstflint = resolve("cure-no-such-mstflint")
	if tool.Mstflint != "cure-no-such-mstflint" {
		t.Fatalf("absent tool resolved to %q", tool.Mstflint)
	}
	if err := tool.Available(); !IsSkip(err) || !strings.Contains(err.Error(), "cure-no-such-mstflint") {
		t.Errorf("Available = %v", err)
	}
	tool.Mstfwreset = "sh"
	if !tool.CanReset() {
		t.Error("CanReset with sh as mstfwreset = false")
	}
	tool.Mstfwreset = "cure-no-such-mstfwreset"
	if tool.CanReset() {
		t.Error("CanReset without mstfwreset = true")
	}
}
