package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/buildinfo"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/nvme"
)

const imageSHA = "166d28b85b942bd3d66ec6bddb3e39745c4430de58c91ae7f19cfa0e8dc3e584"

func manifest(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type recEmitter struct {
	mu       sync.Mutex
	verdicts []*curev1.Verdict
	metrics  []*curev1.Metric
	progress []*curev1.Progress
	samples  []*curev1.Samples
	logs     int
	ready    []*curev1.PairReady
	results  []*curev1.PairResult
}

func (r *recEmitter) PairReady(p *curev1.PairReady) {
	r.mu.Lock()
	r.ready = append(r.ready, p)
	r.mu.Unlock()
}

func (r *recEmitter) PairResult(p *curev1.PairResult) {
	r.mu.Lock()
	r.results = append(r.results, p)
	r.mu.Unlock()
}

func (r *recEmitter) Samples(s *curev1.Samples) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

func (r *recEmitter) Progress(p *curev1.Progress) {
	r.mu.Lock()
	r.progress = append(r.progress, p)
	r.mu.Unlock()
}

func (r *recEmitter) Verdict(v *curev1.Verdict) {
	r.mu.Lock()
	r.verdicts = append(r.verdicts, v)
	r.mu.Unlock()
}
func (r *recEmitter) Log(string, string, map[string]string) {
	r.mu.Lock()
	r.logs++
	r.mu.Unlock()
}
func (r *recEmitter) Metric(name string, v float64, unit string, l map[string]string) {
	r.mu.Lock()
	r.metrics = append(r.metrics, &curev1.Metric{Name: name, Value: v, Unit: unit, Labels: l})
	r.mu.Unlock()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func qemuCtrl(idx int, fw string) *inventory.Controller {
	return &inventory.Controller{Index: idx,
		Info:     nvme.Info{Name: "nvme" + string(rune('0'+idx)), Model: "QEMU NVMe Ctrl", FirmwareRev: "sysfs-value", VendorID: 0x1b36},
		Identify: &nvme.Controller{VID: 0x1b36, MN: "QEMU NVMe Ctrl", SN: "deadbeef", FR: fw}}
}

func assignment(t *testing.T, mode curev1.Mode, yaml []byte) *curev1.Assignment {
	return &curev1.Assignment{RunId: "run-1", NodeId: "node-1", Mode: mode, ManifestYaml: yaml, ManifestName: "qemu-nvme.yaml",
		ArtifactBaseUrl: "http://10.0.2.2:8080/artifacts/",
		FirstBoot:       &curev1.FirstBoot{InstanceId: "i-1", CallbackUrl: "http://10.0.2.2:8080/ready", CallbackToken: "cb-tok"}}
}

func TestNVMeMatch(t *testing.T) {
	e := New(Config{Log: quiet(), Controllers: func() ([]*inventory.Controller, error) {
		return []*inventory.Controller{qemuCtrl(0, "7.2.22")}, nil
	}})
	em := &recEmitter{}
	out := e.Run(context.Background(), "nvme", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), em)
	if out.Status != curev1.PhaseStatus_PHASE_SKIPPED {
		t.Fatalf("outcome %+v", out)
	}
	if len(em.verdicts) != 1 {
		t.Fatalf("verdicts %v", em.verdicts)
	}
	v := em.verdicts[0]
	if v.Component != "nvme/0" || v.Check != "firmware" || v.Status != curev1.VerdictStatus_MATCH || v.Observed != "7.2.22" || v.Expected != "7.2.22" {
		t.Errorf("verdict %v", v)
	}
	if !strings.Contains(v.Message, "identify") {
		t.Errorf("verdict message %q does not name the source of the value", v.Message)
	}
}

func TestNVMeDriftProvisionFailsAuditReports(t *testing.T) {
	yaml := []byte(strings.Replace(string(manifest(t)), `version: "7.2.22"`, `version: "8.0.1"`, 1))
	e := New(Config{Log: quiet(), Controllers: func() ([]*inventory.Controller, error) {
		return []*inventory.Controller{qemuCtrl(0, "7.2.22")}, nil
	}})
	em := &recEmitter{}
	out := e.Run(context.Background(), "nvme", assignment(t, curev1.Mode_MODE_PROVISION, yaml), em)
	want := "nvme firmware update failed: nvme/0: runner has no NVMe firmware device opener configured"
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || out.Message != want {
		t.Errorf("provision outcome %+v, want FAILED %q", out, want)
	}
	if em.verdicts[0].Status != curev1.VerdictStatus_DRIFT || em.verdicts[0].Expected != "8.0.1" {
		t.Errorf("verdict %v", em.verdicts[0])
	}

	em = &recEmitter{}
	out = e.Run(context.Background(), "nvme", assignment(t, curev1.Mode_MODE_AUDIT, yaml), em)
	if out.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.Message, "1 drift") {
		t.Errorf("audit outcome %+v, want OK reporting drift", out)
	}
	if len(em.verdicts) != 1 || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT {
		t.Errorf("audit verdicts %v", em.verdicts)
	}
}

func TestNVMeNoMatchingController(t *testing.T) {
	e := New(Config{Log: quiet(), Controllers: func() ([]*inventory.Controller, error) {
		c := qemuCtrl(0, "7.2.22")
		c.Identify.MN = "Samsung PM1733"
		return []*inventory.Controller{c}, nil
	}})
	em := &recEmitter{}
	out := e.Run(context.Background(), "nvme", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED {
		t.Errorf("outcome %+v", out)
	}
	v := em.verdicts[0]
	if v.Status != curev1.VerdictStatus_ERROR || v.Component != "nvme" || !strings.Contains(v.Message, `model="QEMU NVMe Ctrl"`) || !strings.Contains(v.Message, "Samsung PM1733") {
		t.Errorf("verdict %v: want ERROR naming selector and what was seen", v)
	}
}

func TestPlanNVMeGates(t *testing.T) {
	ctrls := []*inventory.Controller{qemuCtrl(0, "2.1.4"), qemuCtrl(1, "1.9"), qemuCtrl(2, "07.2.22")}
	ctrls[2].Identify.VID = 0x144d
	entries := []manifests.Firmware{
		{Name: "samsung", Component: "nvme", Match: manifests.Match{VendorID: "0x144d"}, Version: "7.2.22", Gate: manifests.GateEqual},
		{Name: "rest", Component: "nvme", Match: manifests.Match{Model: "QEMU*"}, Version: "2.0", Gate: manifests.GateAtLeast},
	}
	k := nvmeKind{}
	checks := fwplan.Plan[*inventory.Controller](k, entries, ctrls)
	got := map[string]curev1.VerdictStatus{}
	for _, c := range checks {
		got[c.Component(k)+"/"+c.Entry.Name] = c.Status
	}
	want := map[string]curev1.VerdictStatus{
		"nvme/2/samsung": curev1.VerdictStatus_MATCH, // 07.2.22 == 7.2.22 after normalisation
		"nvme/0/rest":    curev1.VerdictStatus_MATCH, // 2.1.4 >= 2.0
		"nvme/1/rest":    curev1.VerdictStatus_DRIFT, // 1.9 < 2.0
	}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	bad := fwplan.Plan[*inventory.Controller](k, []manifests.Firmware{{Name: "x", Match: manifests.Match{VendorID: "zz"}}}, ctrls)
	if len(bad) != 1 || bad[0].Status != curev1.VerdictStatus_ERROR || !strings.Contains(bad[0].Message, "vendorId") {
		t.Errorf("bad vendor id: %+v", bad)
	}
}

// TestUnknownPhaseFails: a phase this runner has no executor for (the
// coordinator is newer than the image) fails with an ERROR verdict, naming
// the runner's and the coordinator's versions; it never skips, so an old
// image cannot pass a phase it never ran.
func TestUnknownPhaseFails(t *testing.T) {
	e := New(Config{Log: quiet(), Version: "v0.9.0-image"})
	for _, p := range []string{"acceptance", "gpu_burn"} {
		em := &recEmitter{}
		a := assignment(t, curev1.Mode_MODE_PROVISION, manifest(t))
		a.CoordinatorVersion = "v1.0.0-coord"
		out := e.Run(context.Background(), p, a, em)
		want := fmt.Sprintf("phase %q unknown to runner cure-runner v0.9.0-image; coordinator v1.0.0-coord asked for it: rebuild the image", p)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || out.Message != want {
			t.Errorf("%s: outcome %+v\nwant PHASE_FAILED %q", p, out, want)
		}
		if len(em.verdicts) != 1 || em.verdicts[0].GetStatus() != curev1.VerdictStatus_ERROR || em.verdicts[0].GetCheck() != p ||
			em.verdicts[0].GetMessage() != want {
			t.Errorf("%s: verdicts %v, want one ERROR saying %q", p, em.verdicts, want)
		}
	}
	// A coordinator that sends no version is still named as such, and the
	// runner's own version defaults to its build's.
	out := New(Config{Log: quiet()}).Run(context.Background(), "acceptance", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), &recEmitter{})
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "cure-runner "+buildinfo.Version("")+";") ||
		!strings.Contains(out.Message, "coordinator (a version that does not send its own) asked for it") {
		t.Errorf("no coordinator version: %+v", out)
	}
}

func TestArtifactURL(t *testing.T) {
	u, err := ArtifactURL(manifests.Artifact{SHA256: strings.ToUpper(imageSHA)}, "http://h:8080/artifacts/")
	if err != nil || u != "http://h:8080/artifacts/sha256/"+imageSHA {
		t.Errorf("by hash: %q %v", u, err)
	}
	u, err = ArtifactURL(manifests.Artifact{URL: "https://mirror/img.raw.zst", SHA256: imageSHA}, "")
	if err != nil || u != "https://mirror/img.raw.zst" {
		t.Errorf("absolute: %q %v", u, err)
	}
	if _, err := ArtifactURL(manifests.Artifact{SHA256: imageSHA}, ""); err == nil || !strings.Contains(err.Error(), "artifact_base_url") {
		t.Errorf("no base: %v", err)
	}
	if _, err := ArtifactURL(manifests.Artifact{SHA256: "abc"}, "http://h/"); err == nil || !strings.Contains(err.Error(), "64 hex") {
		t.Errorf("bad sha: %v", err)
	}
	if _, err := ArtifactURL(manifests.Artifact{URL: "file:///etc/passwd", SHA256: imageSHA}, ""); err == nil {
		t.Error("file:// URL accepted")
	}
}

// fakeImages records what it was asked to write.
type fakeImages struct {
	writes   []diskimage.Options
	verified []string
	writeErr error
	progress []int64
	// verifyErrs are returned by successive Verify calls (nil after).
	verifyErrs []error
}

var fakeReadback = diskimage.Digest{Grain: 1 << 20, Length: 1 << 30, CRCs: make([]uint32, 1024)}

func (f *fakeImages) Write(ctx context.Context, o diskimage.Options) (*diskimage.Result, error) {
	f.writes = append(f.writes, o)
	if f.writeErr != nil {
		return nil, f.writeErr
	}
	for _, n := range f.progress {
		o.Progress(n)
	}
	return &diskimage.Result{DownloadedBytes: 16777216, WrittenBytes: 1 << 30, SHA256: imageSHA, Readback: fakeReadback, Decoder: "/usr/bin/zstd", ZeroBytes: 1 << 29, Duration: 10 * time.Second}, nil
}

func (f *fakeImages) Verify(ctx context.Context, target string, d diskimage.Digest) error {
	f.verified = append(f.verified, target+"|"+d.String())
	if len(f.verifyErrs) > 0 {
		err := f.verifyErrs[0]
		f.verifyErrs = f.verifyErrs[1:]
		return err
	}
	return nil
}

type fakeSeeds struct {
	missesLeft int
	found      []string
	seeds      []Seed
}

func (f *fakeSeeds) FindSeedPartition(disk string) (string, error) {
	if f.missesLeft > 0 {
		f.missesLeft--
		return "", errors.New("no CIDATA partition yet")
	}
	f.found = append(f.found, disk)
	return "/dev/" + disk + "p2", nil
}

func (f *fakeSeeds) WriteSeed(part string, s Seed) error {
	f.seeds = append(f.seeds, s)
	return nil
}

func disks() []blockdev.Disk {
	return []blockdev.Disk{
		{Name: "nvme0n1", Path: "/dev/nvme0n1", SizeBytes: 1 << 30, Model: "QEMU NVMe Ctrl", Serial: "deadbeef", Transport: "nvme"},
		{Name: "sda", Path: "/dev/sda", SizeBytes: 1 << 30, Model: "QEMU HARDDISK", Transport: "sata", BootMedium: true},
	}
}

// fakeClock advances one second per call, so progress throttling is testable.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func TestOSInstallHappyPath(t *testing.T) {
	img := &fakeImages{progress: []int64{1, 2, 3, 4, 5, 6}}
	seeds := &fakeSeeds{missesLeft: 2}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks(), nil }, Images: img, Seeds: seeds, SystemSerial: "SN1", SeedWait: time.Hour})
	e.cfg.now = clk.now
	em := &recEmitter{}
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), em)
	if out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Fatalf("outcome %+v", out)
	}
	w := img.writes[0]
	if w.URL != "http://10.0.2.2:8080/artifacts/sha256/"+imageSHA || w.Target != "/dev/nvme0n1" || w.SHA256 != imageSHA || w.Size != 16777216 || w.Format != "raw.zst" || w.Client == nil {
		t.Errorf("write options %+v", w)
	}
	if len(img.verified) != 1 || img.verified[0] != "/dev/nvme0n1|"+fakeReadback.String() {
		t.Errorf("verify calls %v", img.verified)
	}
	if len(seeds.seeds) != 1 {
		t.Fatalf("seeds %v", seeds.seeds)
	}
	s := seeds.seeds[0]
	if s.Hostname != "node-1" || s.InstanceID != "i-1" || s.CallbackURL != "http://10.0.2.2:8080/ready" || s.CallbackToken != "cb-tok" {
		t.Errorf("seed %+v", s)
	}
	v := em.verdicts[len(em.verdicts)-1]
	if v.Component != "disk/nvme0n1" || v.Check != "os_install" || v.Status != curev1.VerdictStatus_PASS ||
		v.Observed != "sha256:"+imageSHA+" read back "+fakeReadback.String()+", 1073741824 bytes (536870912 zero, zeroed) 107.4 MB/s, decoder /usr/bin/zstd" {
		t.Errorf("verdict %v", v)
	}
	// 6 progress callbacks one second apart, every 2 s at most: 3 throttled
	// rounds of (bytes, MB/s), plus the final throughput.
	var written int
	for _, m := range em.metrics {
		if m.Name == "os_install.written" {
			written++
		}
	}
	if written != 3 {
		t.Errorf("progress metrics emitted %d times, want 3 (throttled to every 2s): %v", written, em.metrics)
	}
}

func TestOSInstallRefusedOutsideProvision(t *testing.T) {
	for _, m := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY, curev1.Mode_MODE_DIAGNOSTIC, curev1.Mode_MODE_BURNIN, curev1.Mode_MODE_UNSPECIFIED, curev1.Mode_MODE_WIPE, curev1.Mode_MODE_SERVICE} {
		img := &fakeImages{}
		listed := false
		e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { listed = true; return disks(), nil }, Images: img, Seeds: &fakeSeeds{}})
		em := &recEmitter{}
		out := e.Run(context.Background(), "os_install", assignment(t, m, manifest(t)), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "refused") {
			t.Errorf("%v: outcome %+v", m, out)
		}
		if len(img.writes) != 0 || listed {
			t.Errorf("%v: disks touched (listed=%v, writes=%d)", m, listed, len(img.writes))
		}
		if len(em.verdicts) != 1 || em.verdicts[0].Status != curev1.VerdictStatus_FAIL {
			t.Errorf("%v: verdicts %v", m, em.verdicts)
		}
	}
}

func TestOSInstallRefusesAmbiguousAndBootMedium(t *testing.T) {
	cases := map[string][]blockdev.Disk{
		"ambiguous": append(disks(), blockdev.Disk{Name: "nvme1n1", Path: "/dev/nvme1n1", SizeBytes: 1 << 30, Model: "QEMU NVMe Ctrl", Transport: "nvme"}),
		"boot only": {{Name: "nvme0n1", Path: "/dev/nvme0n1", SizeBytes: 1 << 30, Model: "QEMU NVMe Ctrl", Transport: "nvme", BootMedium: true}},
		"none":      {},
	}
	for name, ds := range cases {
		img := &fakeImages{}
		e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return ds, nil }, Images: img, Seeds: &fakeSeeds{}})
		em := &recEmitter{}
		out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "targetDisk") {
			t.Errorf("%s: outcome %+v", name, out)
		}
		if len(img.writes) != 0 {
			t.Errorf("%s: image written", name)
		}
	}
	// Boot medium detection failing is a refusal too.
	img := &fakeImages{}
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks(), errors.New("root=UUID=... cannot be mapped") }, Images: img, Seeds: &fakeSeeds{}})
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), &recEmitter{})
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || len(img.writes) != 0 || !strings.Contains(out.Message, "boot medium") {
		t.Errorf("boot medium unknown: %+v, writes %d", out, len(img.writes))
	}
}

func TestOSInstallWriteErrorFails(t *testing.T) {
	img := &fakeImages{writeErr: errors.New("sha256 mismatch: got 00.., want 16..")}
	seeds := &fakeSeeds{}
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks(), nil }, Images: img, Seeds: seeds})
	em := &recEmitter{}
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, manifest(t)), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "sha256 mismatch") || !strings.Contains(out.Message, "/dev/nvme0n1") {
		t.Errorf("outcome %+v", out)
	}
	v := em.verdicts[len(em.verdicts)-1]
	if v.Component != "disk/nvme0n1" || v.Status != curev1.VerdictStatus_FAIL {
		t.Errorf("verdict %v", v)
	}
	if len(img.verified) != 0 || len(seeds.seeds) != 0 {
		t.Error("verify or seed ran after a failed write")
	}
}

// A SKU that pins a chunk list: the writer gets the list's store URL and
// pin, and downloads over several Range connections.
func TestOSInstallChunkList(t *testing.T) {
	img := &fakeImages{}
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return disks(), nil }, Images: img, Seeds: &fakeSeeds{}, SystemSerial: "SN1", SeedWait: time.Hour})
	chunks := strings.Repeat("c1", 32)
	m := strings.Replace(string(manifest(t)), "      format: raw.zst\n", "      format: raw.zst\n      chunks: "+chunks+"\n", 1)
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, []byte(m)), &recEmitter{})
	if out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Fatalf("outcome %+v", out)
	}
	w := img.writes[0]
	if w.ChunksURL != "http://10.0.2.2:8080/artifacts/sha256/"+chunks || w.ChunksSHA256 != chunks || w.Connections != chunkConnections {
		t.Errorf("write options: chunks %q %q, connections %d", w.ChunksURL, w.ChunksSHA256, w.Connections)
	}
}
