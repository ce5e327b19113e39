package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/tools/mellanox"
	"github.com/cure-oss/cure/tools/mstflint"
	"github.com/cure-oss/cure/tools/pci/pcitest"
	"github.com/cure-oss/cure/tools/pci/vpd"
)

// pciFn adds a PCI function to a fixture root.
func pciFn(t *testing.T, root, addr string, vendor, device uint16, class uint32, vpdb []byte, vf bool) {
	t.Helper()
	a := pcitest.Adapter{Addr: addr, Vendor: vendor, Device: device, Class: class, VPD: vpdb}
	if vf {
		a.PhysFn = "0000:17:00.0"
	}
	pcitest.AddAdapter(t, root, a)
}

// vpdBytes builds PCI VPD: identifier string, VPD-R with PN, end tag.
func vpdBytes(name, pn string) []byte { return vpd.Encode(vpd.Fields{Name: name, PartNumber: pn}) }

// mftQuery renders `mstflint query` output shaped like the tools/mstflint
// fixtures; running differs from flash when a burn waits for a reset.
func mftQuery(flash, running, psid string) string {
	s := "Image type:            FS4\nFW Version:            " + flash + "\n"
	if running != "" && running != flash {
		s += "FW Version(Running):   " + running + "\n"
	}
	return s + "FW Release Date:       4.9.2024\nProduct Version:       " + flash +
		"\nRom Info:              type=UEFI version=14.36.16 cpu=AMD64,AARCH64\nDescription:           UID                GuidsNumber\n" +
		"Base GUID:             N/A                     4\nPSID:                  " + psid + "\nSecurity Attributes:   secure-fw\n"
}

type adapter struct{ flash, running, psid string }

// fakeMFT answers mstflint/mstfwreset for several adapters. An image file
// holds its own `mstflint -i` query output, so the fake reads whatever
// file the phase downloaded: the path passed is the path checked.
type fakeMFT struct {
	t          *testing.T
	dev        map[string]*adapter
	resetFails bool
	calls      []string
}

func (f *fakeMFT) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	name = filepath.Base(name)
	line := name + " " + strings.Join(args, " ")
	f.calls = append(f.calls, line)
	exit := errors.New("exit status 1")
	switch {
	case name == "mstflint" && len(args) == 3 && args[0] == "-d" && args[2] == "query":
		a, ok := f.dev[args[1]]
		if !ok {
			return []byte("-E- Cannot open Device: " + args[1] + ". No such file or directory. MFE_CR_ERROR\n"), nil, exit
		}
		return []byte(mftQuery(a.flash, a.running, a.psid)), nil, nil
	case name == "mstflint" && len(args) == 3 && args[0] == "-i" && args[2] == "query":
		b, err := os.ReadFile(args[1])
		if err != nil {
			return []byte("-E- Cannot open " + args[1] + "\n"), nil, exit
		}
		return b, nil, nil
	case name == "mstflint" && len(args) == 6 && args[4] == "-y" && args[5] == "burn":
		b, _ := os.ReadFile(args[3])
		q, err := mstflint.ParseQuery(b)
		if err != nil {
			f.t.Errorf("burn of an unreadable image: %v", err)
			return nil, nil, exit
		}
		f.dev[args[1]].flash = q.FWVersion
		return []byte("-I- To load new FW run mstfwreset or reboot machine.\n"), nil, nil
	case name == "mstfwreset" && len(args) == 4 && args[3] == "reset":
		if f.resetFails {
			return []byte("-E- Reset level 3 is not supported for device " + args[1] + "\n"), nil, exit
		}
		f.dev[args[1]].running = f.dev[args[1]].flash
		return []byte("-I- FW was loaded successfully.\n"), nil, nil
	}
	f.t.Errorf("unexpected command %q", line)
	return nil, nil, exit
}

func (f *fakeMFT) ran(sub string) bool {
	for _, c := range f.calls {
		if strings.Contains(c, sub) {
			return true
		}
	}
	return false
}

// have lists the tools the fake image contains.
func lookPath(have ...string) func(string) (string, error) {
	return func(s string) (string, error) {
		for _, h := range have {
			if filepath.Base(s) == h {
				return "/usr/bin/" + h, nil
			}
		}
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", s)
	}
}

// nicNode is a fake node with one ConnectX-7 at 0000:17:00.0 (both ports)
// and a virtio NIC.
func nicNode(t *testing.T, f *fakeMFT, tools ...string) (Config, string) {
	root := t.TempDir()
	pciFn(t, root, "0000:17:00.0", 0x15b3, 0x1021, 0x020000, vpdBytes("NVIDIA ConnectX-7 HHHL Adapter Card", "MCX75310AAS-NEAT"), false)
	pciFn(t, root, "0000:17:00.1", 0x15b3, 0x1021, 0x020000, nil, false)
	pciFn(t, root, "0000:00:03.0", 0x1af4, 0x1041, 0x020000, nil, false)
	tmp := t.TempDir()
	if tools == nil {
		tools = []string{"mstflint", "mstfwreset"}
	}
	return Config{Log: quiet(), Root: root, TmpDir: tmp,
		MFT: &mstflint.Tool{Runner: f, SysRoot: root, LookPath: lookPath(tools...), Log: quiet()}}, tmp
}

func nicManifest(entry string) []byte {
	return []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: cx7-node\nspec:\n  firmware:\n" + entry)
}

// nicEntry pins psid/version with an artifact of image's sha256 and size.
func nicEntry(psid, version, gate, activation string, image []byte) string {
	sum := sha256.Sum256(image)
	return fmt.Sprintf(`    - name: cx7-fabric
      component: nic
      via: in-band
      match:
        vendorId: "0x15b3"
        psid: %s
      version: %q
      gate: %s
      artifact:
        sha256: %s
        size: %d
        format: bin
      activation: %s
`, psid, version, gate, hex.EncodeToString(sum[:]), len(image), activation)
}

// serveCounted serves image by its sha256 and counts downloads.
func serveCounted(t *testing.T, image []byte) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	sum := sha256.Sum256(image)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/sha256/"+hex.EncodeToString(sum[:])) {
			http.NotFound(w, r)
			return
		}
		n.Add(1)
		w.Write(image)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func nicAssign(t *testing.T, mode curev1.Mode, yaml []byte, srv *httptest.Server) *curev1.Assignment {
	a := assignment(t, mode, yaml)
	a.ManifestName = "cx7-node.yaml"
	if srv != nil {
		a.ArtifactBaseUrl = srv.URL + "/artifacts/"
	}
	return a
}

func TestNICMatchIsSkippedAndNeverBurns(t *testing.T) {
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.43.2026", "28.43.2026", "MT_0000000838"}}}
	cfg, _ := nicNode(t, f)
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
	em := &recEmitter{}
	out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(nicEntry("MT_0000000838", "28.43.2026", "at-least", "mstfwreset", img)), nil), em)
	if out.Status != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(out.Message, "all 1 pinned adapter(s) match") {
		t.Fatalf("outcome %+v", out)
	}
	if len(em.verdicts) != 1 {
		t.Fatalf("verdicts %v", em.verdicts)
	}
	v := em.verdicts[0]
	if v.Component != "nic/0000:17:00.0" || v.Status != curev1.VerdictStatus_MATCH || v.Observed != "28.43.2026" || v.Expected != ">= 28.43.2026" ||
		!strings.Contains(v.Message, "PSID MT_0000000838") {
		t.Errorf("verdict %v", v)
	}
	if strings.Join(f.calls, "\n") != "mstflint -d 0000:17:00.0 query" {
		t.Errorf("calls %q", f.calls)
	}
}

func TestNICDriftProvisionBurnsAndResets(t *testing.T) {
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
	cfg, tmp := nicNode(t, f)
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
	srv, hits := serveCounted(t, img)
	em := &recEmitter{}
	a := nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(nicEntry("MT_0000000838", "28.43.2026", "at-least", "mstfwreset", img)), srv)
	out := New(cfg).Run(context.Background(), "nic", a, em)
	if out.Status != curev1.PhaseStatus_PHASE_OK || out.RebootRequired || out.Message != "updated nic/0000:17:00.0" {
		t.Fatalf("outcome %+v", out)
	}
	if f.dev["0000:17:00.0"].running != "28.43.2026" || hits.Load() != 1 {
		t.Fatalf("adapter %+v, downloads %d", f.dev["0000:17:00.0"], hits.Load())
	}
	if len(em.verdicts) != 2 || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT || em.verdicts[0].Observed != "28.39.1002" ||
		em.verdicts[1].Check != "firmware_update" || em.verdicts[1].Status != curev1.VerdictStatus_PASS || em.verdicts[1].Observed != "28.43.2026" {
		t.Fatalf("verdicts %v", em.verdicts)
	}
	for _, want := range []string{"-i " + tmp + "/cure-artifact-", "-y burn", "mstfwreset -d 0000:17:00.0 -y reset"} {
		if !f.ran(want) {
			t.Errorf("no %q in %q", want, f.calls)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("downloaded image left in tmpfs: %v", left)
	}
}

func TestNICActivationNeedsReboot(t *testing.T) {
	for _, tc := range []struct {
		name, activation string
		tools            []string
		resetFails       bool
		note             string
	}{
		{"host-reboot", "host-reboot", nil, false, ""},
		{"no mstfwreset in image", "mstfwreset", []string{"mstflint"}, false, "mstfwreset is not in this image"},
		{"mstfwreset refused", "mstfwreset", nil, true, "Reset level 3 is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMFT{t: t, resetFails: tc.resetFails, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
			cfg, _ := nicNode(t, f, tc.tools...)
			img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
			srv, _ := serveCounted(t, img)
			em := &recEmitter{}
			out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(nicEntry("MT_0000000838", "28.43.2026", "equal", tc.activation, img)), srv), em)
			if out.Status != curev1.PhaseStatus_PHASE_OK || !out.RebootRequired || !strings.Contains(out.Message, "(at next reboot)") {
				t.Fatalf("outcome %+v", out)
			}
			if a := f.dev["0000:17:00.0"]; a.flash != "28.43.2026" || a.running != "28.39.1002" {
				t.Errorf("adapter %+v", a)
			}
			v := em.verdicts[len(em.verdicts)-1]
			if v.Status != curev1.VerdictStatus_DRIFT || !strings.Contains(v.Message, "activates at the next reboot") || !strings.Contains(v.Message, tc.note) {
				t.Errorf("verdict %v", v)
			}
			if tc.activation == "host-reboot" && f.ran("mstfwreset") {
				t.Errorf("mstfwreset run for host-reboot: %q", f.calls)
			}
		})
	}
}

func TestNICImagePSIDMismatchFailsBeforeBurn(t *testing.T) {
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
	cfg, _ := nicNode(t, f)
	// The manifest selects the CX7 by PSID but its artifact is a BlueField-3 image.
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000884"))
	srv, _ := serveCounted(t, img)
	em := &recEmitter{}
	out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(nicEntry("MT_0000000838", "28.43.2026", "equal", "mstfwreset", img)), srv), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "nothing burnt: refusing to burn") ||
		!strings.Contains(out.Message, "image PSID MT_0000000884 does not match device PSID MT_0000000838") {
		t.Fatalf("outcome %+v", out)
	}
	if f.ran("burn") || f.dev["0000:17:00.0"].flash != "28.39.1002" {
		t.Fatalf("burnt despite the PSID mismatch: %q", f.calls)
	}
	if v := em.verdicts[len(em.verdicts)-1]; v.Status != curev1.VerdictStatus_FAIL || v.Check != "firmware_update" {
		t.Errorf("verdict %v", v)
	}
}

func TestNICBadArtifactFailsBeforeBurn(t *testing.T) {
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
	cfg, tmp := nicNode(t, f)
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
	// The manifest pins another file of the same size; the server sends
	// the wrong bytes under its name.
	other := append([]byte(nil), img...)
	other[0] = 'X'
	y := nicEntry("MT_0000000838", "28.43.2026", "equal", "mstfwreset", other)
	sum := sha256.Sum256(other)
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, hex.EncodeToString(sum[:])) {
			w.Write(img)
		}
	}))
	defer srv2.Close()
	em := &recEmitter{}
	out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(y), srv2), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "sha256 mismatch") {
		t.Fatalf("outcome %+v", out)
	}
	if f.ran("burn") || f.ran("-i ") {
		t.Fatalf("image used despite its sha256: %q", f.calls)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("rejected download left behind: %v", left)
	}
}

func TestNICAuditAndVerifyNeverBurn(t *testing.T) {
	for _, mode := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY} {
		f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
		cfg, _ := nicNode(t, f)
		img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
		srv, hits := serveCounted(t, img)
		em := &recEmitter{}
		out := New(cfg).Run(context.Background(), "nic", nicAssign(t, mode, nicManifest(nicEntry("MT_0000000838", "28.43.2026", "equal", "mstfwreset", img)), srv), em)
		if out.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.Message, "1 drift") || !strings.Contains(out.Message, "reported only in "+mode.String()) {
			t.Errorf("%s: outcome %+v", mode, out)
		}
		if len(f.calls) != 1 || hits.Load() != 0 || len(em.verdicts) != 1 || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT {
			t.Errorf("%s: calls %q downloads %d verdicts %v", mode, f.calls, hits.Load(), em.verdicts)
		}
	}
}

func TestNICSkips(t *testing.T) {
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000838"))
	entry := nicEntry("MT_0000000838", "28.43.2026", "equal", "mstfwreset", img)
	run := func(cfg Config, y []byte) (agentOut string, st curev1.PhaseStatus, em *recEmitter) {
		em = &recEmitter{}
		out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, y, nil), em)
		return out.Message, out.Status, em
	}
	f := &fakeMFT{t: t, dev: map[string]*adapter{}}
	cfg, _ := nicNode(t, f)

	t.Run("no nic entries", func(t *testing.T) {
		redfish := strings.Replace(strings.Replace(entry, "via: in-band", "via: redfish", 1), "psid: MT_0000000838", "redfishId: CX7_*", 1)
		for _, y := range [][]byte{manifest(t), nicManifest(redfish)} {
			msg, st, _ := run(cfg, y)
			if st != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(msg, "pins no nic firmware") {
				t.Errorf("%s %q", st, msg)
			}
		}
	})
	t.Run("no Mellanox device (QEMU)", func(t *testing.T) {
		c := cfg
		c.Root = t.TempDir()
		pciFn(t, c.Root, "0000:00:03.0", 0x1af4, 0x1041, 0x020000, nil, false)
		msg, st, em := run(c, nicManifest(entry))
		if st != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(msg, "no Mellanox (PCI vendor 0x15b3) Ethernet/InfiniBand adapter on this node") || len(em.verdicts) != 0 {
			t.Errorf("%s %q %v", st, msg, em.verdicts)
		}
		if len(f.calls) != 0 {
			t.Errorf("mstflint ran without a device: %q", f.calls)
		}
	})
	t.Run("mstflint absent", func(t *testing.T) {
		c := cfg
		c.MFT = &mstflint.Tool{Runner: f, SysRoot: c.Root, LookPath: lookPath(), Log: quiet()}
		msg, st, em := run(c, nicManifest(entry))
		if st != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(msg, "mstflint not found in this image") {
			t.Errorf("%s %q", st, msg)
		}
		if len(em.verdicts) != 1 || em.verdicts[0].Status != curev1.VerdictStatus_SKIP || em.verdicts[0].Component != "nic/0000:17:00.0" {
			t.Errorf("verdicts %v", em.verdicts)
		}
		c.MFT = nil
		if msg, st, _ := run(c, nicManifest(entry)); st != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(msg, "no mstflint tool configured") {
			t.Errorf("nil tool: %s %q", st, msg)
		}
	})
}

func TestNICEntryMatchingNothingIsAnError(t *testing.T) {
	f := &fakeMFT{t: t, dev: map[string]*adapter{"0000:17:00.0": {"28.39.1002", "28.39.1002", "MT_0000000838"}}}
	cfg, _ := nicNode(t, f)
	img := []byte(mftQuery("28.43.2026", "", "MT_0000000999"))
	em := &recEmitter{}
	out := New(cfg).Run(context.Background(), "nic", nicAssign(t, curev1.Mode_MODE_PROVISION, nicManifest(nicEntry("MT_0000000999", "28.43.2026", "equal", "mstfwreset", img)), nil), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, `no Mellanox adapter matches {vendorId="0x15b3" psid="MT_0000000999"}`) ||
		!strings.Contains(out.Message, "0000:17:00.0 0x1021 ConnectX-7 MCX75310AAS-NEAT PSID MT_0000000838") {
		t.Fatalf("outcome %+v", out)
	}
	// The adapter no entry selects is reported as such, not judged.
	var skip bool
	for _, v := range em.verdicts {
		skip = skip || (v.Component == "nic/0000:17:00.0" && v.Status == curev1.VerdictStatus_SKIP)
	}
	if !skip || f.ran("burn") {
		t.Errorf("verdicts %v calls %q", em.verdicts, f.calls)
	}
}

func TestPlanNICModelAndQueryErrors(t *testing.T) {
	cx7 := mellanox.NIC{PCI: "0000:17:00.0", DeviceID: 0x1021, Family: "ConnectX-7", PartNumber: "MCX75310AAS-NEAT"}
	bf3 := mellanox.NIC{PCI: "0000:a3:00.0", DeviceID: 0xa2dc, Family: "BlueField-3"}
	q := func(v, psid string) *mstflint.Query { return &mstflint.Query{FWVersion: v, PSID: psid} }
	obs := []NICObservation{
		{Device: cx7, Query: q("28.39.1002", "MT_0000000838")},
		{Device: bf3, Query: q("32.41.1000", "MT_0000000884")},
		{Device: mellanox.NIC{PCI: "0000:3b:00.0"}, Err: errors.New("-E- Cannot open Device")},
	}
	y := nicManifest(strings.Replace(nicEntry("MT_0000000838", "28.39.1002", "equal", "none", []byte("x")), `        psid: MT_0000000838`, `        model: "MCX753*"`, 1))
	sku, err := New(Config{}).sku(nicAssign(t, curev1.Mode_MODE_AUDIT, y, nil))
	if err != nil {
		t.Fatal(err)
	}
	k := &nicKind{}
	checks := fwplan.Plan[NICObservation](k, sku.FirmwareVia("nic", manifests.ViaInBand), obs)
	var got []string
	for _, c := range checks {
		got = append(got, c.Component(k)+"="+c.Status.String())
	}
	want := "nic/0000:3b:00.0=ERROR nic/0000:17:00.0=MATCH nic/0000:a3:00.0=SKIP"
	if strings.Join(got, " ") != want {
		t.Errorf("plan %q, want %q", got, want)
	}
	if !strings.Contains(checks[0].Message, "Cannot open Device") {
		t.Errorf("query error message %q", checks[0].Message)
	}
}
