package hostdisk

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sizes(m map[string]int64) func(string) (int64, error) {
	return func(p string) (int64, error) { return m[p], nil }
}

func TestNewPlanLayout(t *testing.T) {
	p, err := NewPlan(Options{Kernel: "k", Initrd: "i", Append: "console=ttyS0", FileSizes: sizes(map[string]int64{"k": 8 << 20, "i": 20 << 20})})
	if err != nil {
		t.Fatal(err)
	}
	if p.SizeBytes != 64<<20 || len(p.Partitions) != 2 {
		t.Fatalf("plan = %+v", p)
	}
	b, c := p.Partitions[0], p.Partitions[1]
	if b.Offset() != 1<<20 || !b.Bootable || !b.Syslinux || b.Label != BootLabel {
		t.Errorf("boot partition = %+v", b)
	}
	if c.Label != CIDataLabel || c.Size() != 8<<20 || c.Offset()+c.Size() != p.SizeBytes || b.Offset()+b.Size() != c.Offset() {
		t.Errorf("cidata partition = %+v", c)
	}
	if cfg := string(b.Content["syslinux.cfg"]); !strings.Contains(cfg, "APPEND initrd=initrd.img console=ttyS0\n") || !strings.Contains(cfg, "KERNEL vmlinuz") {
		t.Errorf("syslinux.cfg = %q", cfg)
	}
}

func TestNewPlanRefusesTooSmall(t *testing.T) {
	_, err := NewPlan(Options{Kernel: "k", Initrd: "i", SizeMiB: 16, FileSizes: sizes(map[string]int64{"k": 8 << 20, "i": 20 << 20})})
	if err == nil || !strings.Contains(err.Error(), "raise the disk size") {
		t.Fatalf("err = %v", err)
	}
	_, err = NewPlan(Options{Kernel: "k", Initrd: "i", SizeMiB: 8, CIDataMiB: 8, FileSizes: sizes(nil)})
	if err == nil || !strings.Contains(err.Error(), "cannot hold") {
		t.Fatalf("err = %v", err)
	}
}

func TestMBR(t *testing.T) {
	p, err := NewPlan(Options{Kernel: "k", Initrd: "i", FileSizes: sizes(nil)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.MBR([]byte{0xfa, 0x31, 0xc0})
	if err != nil {
		t.Fatal(err)
	}
	if m[0] != 0xfa || m[510] != 0x55 || m[511] != 0xAA || binary.LittleEndian.Uint32(m[440:]) != DiskID {
		t.Errorf("boot code, signature or disk id wrong")
	}
	e1, e2 := m[446:462], m[462:478]
	if e1[0] != 0x80 || e1[4] != 0x0e || binary.LittleEndian.Uint32(e1[8:]) != 2048 || binary.LittleEndian.Uint32(e1[12:]) != 112640 {
		t.Errorf("entry 1 = % x", e1)
	}
	if e2[0] != 0 || binary.LittleEndian.Uint32(e2[8:]) != 114688 || binary.LittleEndian.Uint32(e2[12:]) != 16384 {
		t.Errorf("entry 2 = % x", e2)
	}
	// CHS of LBA 2048 in 255/63 geometry: head 32, sector 33, cylinder 0.
	if e1[1] != 32 || e1[2] != 33 || e1[3] != 0 {
		t.Errorf("CHS start = % x", e1[1:4])
	}
	if _, err := p.MBR(make([]byte, 441)); err == nil {
		t.Error("oversized boot code accepted")
	}
}

func needTools(t *testing.T) {
	for _, tool := range []string{"mkfs.vfat", "mcopy", "syslinux", "sfdisk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if _, err := os.Stat(MBRBootCode); err != nil {
		t.Skip("syslinux MBR not installed")
	}
}

// TestAssembleReproducible builds the disk twice from the same inputs and
// checks the bytes match, the table reads back with sfdisk and the files
// are on the boot partition.
func TestAssembleReproducible(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	k, i := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(k, []byte(strings.Repeat("kernel", 1000)), 0o644)
	os.WriteFile(i, []byte(strings.Repeat("initrd", 1000)), 0o600)
	p, err := NewPlan(Options{Kernel: k, Initrd: i, Append: "console=ttyS0 panic=-1", SizeMiB: 32, CIDataMiB: 4, FileSizes: StatSize})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var mans []*Manifest
	for _, sub := range []string{"a", "b"} {
		m, err := Assemble(context.Background(), p, filepath.Join(dir, sub), ExecRunner, log)
		if err != nil {
			t.Fatal(err)
		}
		mans = append(mans, m)
		// Let the clock move so any leaked timestamp would show.
		os.Chtimes(k, timeNowPlus(), timeNowPlus())
	}
	for j := range mans[0].Files {
		if mans[0].Files[j] != mans[1].Files[j] {
			t.Errorf("not reproducible: %+v vs %+v", mans[0].Files[j], mans[1].Files[j])
		}
	}
	raw := filepath.Join(dir, "a", RawName)
	out, err := exec.Command("sfdisk", "--dump", raw).CombinedOutput()
	if err != nil {
		t.Fatalf("sfdisk: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "label-id: 0xc0de0001") || !strings.Contains(string(out), "start=        2048, size=       55296, type=e, bootable") {
		t.Errorf("sfdisk --dump:\n%s", out)
	}
	cmd := exec.Command("mdir", "-a", "-b", "-i", raw+"@@1M", "::")
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v: %s", err, out)
	}
	for _, f := range []string{"VMLINUZ", "INITRD.IMG", "SYSLINUX.CFG", "LDLINUX.SYS", "LDLINUX.C32"} {
		if !strings.Contains(strings.ToUpper(string(out)), f) {
			t.Errorf("boot partition lacks %s:\n%s", f, out)
		}
	}
	if len(mans[0].Partitions) != 2 || mans[0].Partitions[1].Label != CIDataLabel || mans[0].Partitions[1].Offset != 28<<20 {
		t.Errorf("partitions = %+v", mans[0].Partitions)
	}
}

func timeNowPlus() time.Time { return time.Now().Add(time.Hour) }

const efiStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// With an EFI stub the boot partition is an ESP (type 0xEF, still active
// for the BIOS path) holding a unified kernel image at \EFI\BOOT\BOOTX64.EFI
// whose sections carry the same kernel, initramfs and command line; the
// bytes are reproducible.
func TestAssembleUEFI(t *testing.T) {
	needTools(t)
	if _, err := os.Stat(efiStub); err != nil {
		t.Skip("systemd-boot-efi not installed")
	}
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	dir := t.TempDir()
	k, i := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(k, []byte(strings.Repeat("kernel", 1000)), 0o644)
	os.WriteFile(i, []byte(strings.Repeat("initrd", 1000)), 0o600)
	p, err := NewPlan(Options{Kernel: k, Initrd: i, Append: "console=ttyS0 panic=-1", SizeMiB: 32, CIDataMiB: 4, EFIStub: efiStub, FileSizes: StatSize})
	if err != nil {
		t.Fatal(err)
	}
	if p.Partitions[0].Type != espType || !p.Partitions[0].Bootable || !p.Partitions[0].Syslinux {
		t.Fatalf("boot partition = %+v, want an active ESP with syslinux", p.Partitions[0])
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var sums []string
	for _, sub := range []string{"a", "b"} {
		m, err := Assemble(context.Background(), p, filepath.Join(dir, sub), ExecRunner, log)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, m.Files[0].SHA256)
		os.Chtimes(k, timeNowPlus(), timeNowPlus())
	}
	if sums[0] != sums[1] {
		t.Errorf("not reproducible: %s vs %s", sums[0], sums[1])
	}
	raw := filepath.Join(dir, "a", RawName)
	out, err := exec.Command("sfdisk", "--dump", raw).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "type=ef, bootable") {
		t.Errorf("sfdisk --dump (%v):\n%s", err, out)
	}
	uki := filepath.Join(dir, "bootx64.efi")
	cmd := exec.Command("mcopy", "-i", raw+"@@1M", "::EFI/BOOT/BOOTX64.EFI", uki)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("no %s on the ESP: %v: %s", UKIPath, err, out)
	}
	// objcopy stamps the build time; the image carries Epoch instead.
	if b, err := os.ReadFile(uki); err != nil {
		t.Fatal(err)
	} else if ts := binary.LittleEndian.Uint32(b[binary.LittleEndian.Uint32(b[0x3c:])+8:]); ts != Epoch {
		t.Errorf("UKI PE timestamp %d, want %d (reproducible)", ts, Epoch)
	}
	// The sections hold the very bytes given.
	for sec, want := range map[string]string{".cmdline": "console=ttyS0 panic=-1", ".linux": strings.Repeat("kernel", 1000), ".initrd": strings.Repeat("initrd", 1000)} {
		got := filepath.Join(dir, "sec")
		if out, err := exec.Command("objcopy", "-O", "binary", "--only-section="+sec, uki, got).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %s: %v: %s", sec, err, out)
		}
		b, _ := os.ReadFile(got)
		if string(b) != want {
			t.Errorf("section %s: %d bytes, want the %d given", sec, len(b), len(want))
		}
	}
	// A kernel the layout cannot hold is refused at plan time.
	_, err = NewPlan(Options{Kernel: "k", Initrd: "i", EFIStub: efiStub, SizeMiB: 256,
		FileSizes: sizes(map[string]int64{"k": MaxUKIKernel + 1, "i": 1, efiStub: 1})})
	if err == nil || !strings.Contains(err.Error(), "unified kernel image") {
		t.Errorf("oversized kernel: err = %v", err)
	}
}
