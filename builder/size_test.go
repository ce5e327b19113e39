package builder

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"
)

// ImageBudget is the most initramfs.cpio.zst of the default image (make
// image, initramfs/cure.yaml) may weigh: what iPXE pulls over the provisioning
// network on every boot of every node (issue 14).
const ImageBudget = 13_000_000

// ImageBudgets is each architecture's budget, its image directory under
// CURE_OUT beside it. arm64's (make image-arm64) was measured at 8.98 MB:
// no zstd(1)/xz(1) and their libraries (x86 host tools; Go decodes), and
// a smaller busybox; its margin is about amd64's.
var ImageBudgets = map[string]struct {
	Dir    string
	Budget int64
}{
	"amd64": {"image", ImageBudget},
	"arm64": {"image-arm64", 10_500_000},
}

// TestImageBudget fails when a built image passes its architecture's
// budget, printing what each megabyte is for. make test builds the amd64
// image first and sets CURE_OUT; the arm64 one is checked where it is
// built (make e2e-arm64, make image-arm64 before make test).
func TestImageBudget(t *testing.T) {
	out := os.Getenv("CURE_OUT")
	if out == "" {
		t.Skip("CURE_OUT not set: run through `make test`, which builds the image first")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		b := ImageBudgets[arch]
		if _, err := os.Stat(filepath.Join(out, b.Dir, ReportName)); err != nil && arch != "amd64" {
			t.Logf("%s: %s not built (make image-arm64), its budget not checked", arch, b.Dir)
			continue
		}
		checkBudget(t, filepath.Join(out, b.Dir), arch, b.Budget)
	}
}

func checkBudget(t *testing.T, dir, arch string, budget int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ReportName))
	if err != nil {
		t.Fatalf("CURE_OUT is set but the %s image is not built: %v", arch, err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s/%s: %v", dir, ReportName, err)
	}
	if r.Arch != "" && r.Arch != arch {
		t.Errorf("%s/%s says arch %q, want %q", dir, ReportName, r.Arch, arch)
	}
	var zst, raw int64
	for _, c := range r.Breakdown {
		zst += c.ZstBytes
		raw += c.Bytes
	}
	if len(r.Breakdown) == 0 || zst != r.Totals.ZstBytes || raw != r.Totals.UncompressedBytes {
		t.Errorf("%s: breakdown sums to %d zst / %d cpio bytes, totals say %d / %d", arch, zst, raw, r.Totals.ZstBytes, r.Totals.UncompressedBytes)
	}
	t.Logf("%s initramfs.cpio.zst %d bytes (budget %d), %s\n%s", arch, r.Totals.ZstBytes, budget, r.Zstd, FormatBreakdown(r.Breakdown))
	if r.Totals.ZstBytes > budget {
		t.Errorf("%s initramfs.cpio.zst is %d bytes, %d over the %d budget; breakdown:\n%s",
			arch, r.Totals.ZstBytes, r.Totals.ZstBytes-budget, budget, FormatBreakdown(r.Breakdown))
	}
}

func TestCategorize(t *testing.T) {
	for p, want := range map[string]string{
		"bbin/bb": "busybox: runner, shell, commands (Go; u-root's init too when it is PID 1)",
		"lib/modules/6.1.0-56-amd64/kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko": "modules: drivers/net/ethernet/mellanox",
		"lib/modules/6.1.0-56-amd64/kernel/drivers/nvme/host/nvme.ko":                            "modules: drivers/nvme",
		"lib/modules/6.1.0-56-amd64/kernel/fs/fat/fat.ko":                                        "modules: fs",
		"lib/modules/6.1.0-56-amd64/kernel/crc64.ko":                                             "modules: other",
		"lib/modules/6.1.0-56-amd64/modules.dep":                                                 "modules: index (modules.dep, modules.alias)",
		"lib/firmware/nvidia/gsp.bin":                                                            "firmware",
		"lib/x86_64-linux-gnu/libcrypto.so.3":                                                    "libraries",
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so":                                               "libraries",
		"usr/sbin/nvme":          "tools: nvme",
		"usr/share/misc/pci.ids": "data: pci.ids",
		"etc/cure/ca.pem":        "config: /etc",
		"init.sh":                "other",
	} {
		if got := categorize(p); got != want {
			t.Errorf("categorize(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestSizeBreakdownSums checks both columns add up to the archive and the
// given total, and that the bigger, less compressible file gets more.
func TestSizeBreakdownSums(t *testing.T) {
	noise := make([]byte, 64<<10)
	x := uint32(1)
	for i := range noise {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		noise[i] = byte(x)
	}
	var b bytes.Buffer
	w := cpio.Newc.Writer(&b)
	for _, r := range []cpio.Record{
		cpio.Directory("bbin", 0o755),
		fileRecord("bbin/bb", noise, 0o755),
		fileRecord("usr/share/misc/pci.ids", bytes.Repeat([]byte("10de  NVIDIA\n"), 1000), 0o644),
		fileRecord("etc/hostname", []byte("node\n"), 0o644),
		cpio.Symlink("init", "bbin/init"),
	} {
		if err := w.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	const total = 70001
	cs, err := sizeBreakdown(b.Bytes(), total)
	if err != nil {
		t.Fatal(err)
	}
	var zst, raw int64
	got := map[string]Category{}
	for _, c := range cs {
		zst += c.ZstBytes
		raw += c.Bytes
		got[c.Name] = c
	}
	if zst != total || raw != int64(b.Len()) {
		t.Errorf("sums %d zst / %d bytes, want %d / %d:\n%s", zst, raw, total, b.Len(), FormatBreakdown(cs))
	}
	bb, ids := got["busybox: runner, shell, commands (Go; u-root's init too when it is PID 1)"], got["data: pci.ids"]
	if bb.Bytes != int64(len(noise)) || bb.Files != 1 || ids.Bytes != 13000 {
		t.Errorf("categories = %+v", cs)
	}
	if cs[0].Name != bb.Name || bb.ZstBytes < 10*ids.ZstBytes {
		t.Errorf("random busybox should cost far more than repetitive pci.ids:\n%s", FormatBreakdown(cs))
	}
	if a := got[archiveCategory]; a.Bytes <= 0 || a.ZstBytes != 0 {
		t.Errorf("archive line = %+v", a)
	}
	if !strings.Contains(FormatBreakdown(cs), "total") {
		t.Error("FormatBreakdown has no total line")
	}
}

func TestCompressZstdNamesMissingTool(t *testing.T) {
	old := zstdTool
	zstdTool = filepath.Join(t.TempDir(), "no-zstd")
	defer func() { zstdTool = old }()
	if _, err := compressZstd([]byte("x")); err == nil || !strings.Contains(err.Error(), "no-zstd") {
		t.Fatalf("err = %v, want the missing zstd named", err)
	}
}
