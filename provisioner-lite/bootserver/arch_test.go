package bootserver

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/bootgate"
)

// archFixture serves an amd64 and an arm64 image; 52:54:00:00:00:0a is a
// node of an arm64 SKU, ...:0b one of an amd64 SKU, ...:0c a machine the
// coordinator does not know but boots (an enlisted one).
func archFixture(t *testing.T, arm64Image bool) *fixture {
	t.Helper()
	f := &fixture{imgDir: t.TempDir(), artDir: t.TempDir(), baseURL: "http://10.0.2.2:8080"}
	armDir := t.TempDir()
	for dir, body := range map[string]string{f.imgDir: "X86", armDir: "ARM"} {
		os.WriteFile(filepath.Join(dir, Kernel), []byte(body+"-KERNEL"), 0o644)
		os.WriteFile(filepath.Join(dir, InitramfsZstd), []byte(body+"-INITRD"), 0o644)
	}
	boot := bootgate.Decision{Boot: true, Cmdline: "cure.node=n", Reason: "run r"}
	f.coord = &fakeCoordinator{decisions: map[string]bootgate.Decision{
		"52:54:00:00:00:0a": boot, "52:54:00:00:00:0b": boot, "52:54:00:00:00:0c": boot}}
	skuArch := map[string]string{"52:54:00:00:00:0a": ArchARM64, "52:54:00:00:00:0b": ArchAMD64}
	cfg := Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.DiscardHandler),
		NodeArch: func(_ context.Context, mac string) (string, error) { return skuArch[mac], nil }}
	if arm64Image {
		cfg.ImageDirs = map[string]string{ArchARM64: armDir}
	}
	s, err := New(cfg, f.coord)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

// TestBootImageByArch: the coordinator boots each node the image of its
// SKU's spec.arch, a machine it does not know the image of its iPXE's
// architecture, and refuses a node whose iPXE contradicts its SKU.
func TestBootImageByArch(t *testing.T) {
	f := archFixture(t, true)
	const armScript = "kernel http://10.0.2.2:8080/image/arm64/vmlinuz initrd=initramfs.cpio.zst console=ttyAMA0 panic=-1 cure.node=n\n" +
		"initrd http://10.0.2.2:8080/image/arm64/initramfs.cpio.zst\n"
	const x86Script = "kernel http://10.0.2.2:8080/image/vmlinuz initrd=initramfs.cpio.zst console=ttyS0 panic=-1 cure.node=n\n" +
		"initrd http://10.0.2.2:8080/image/initramfs.cpio.zst\n"
	for path, want := range map[string]string{
		"/ipxe/52-54-00-00-00-0a":              armScript, // the SKU says arm64
		"/ipxe/52-54-00-00-00-0a?arch=arm64":   armScript,
		"/ipxe/52-54-00-00-00-0b":              x86Script,
		"/ipxe/52-54-00-00-00-0b?arch=i386":    x86Script, // BIOS undionly.kpxe is an i386 iPXE
		"/ipxe/52-54-00-00-00-0c?arch=arm64":   armScript, // unknown: the iPXE's architecture
		"/ipxe/52-54-00-00-00-0c?arch=x86_64":  x86Script,
		"/ipxe/52-54-00-00-00-0c":              x86Script,
		"/ipxe/52-54-00-00-00-0a?arch=x86_64":  "the SKU of 52:54:00:00:00:0a says spec.arch arm64, but it booted a x86_64 iPXE",
		"/ipxe/52-54-00-00-00-0c?arch=riscv64": "iPXE of architecture _riscv64_: CURE has images for x86_64 and arm64 only",
	} {
		resp, body := f.get(t, path)
		if !strings.Contains(body, want) {
			t.Errorf("%s: %d\n%s\nwant it to contain:\n%s", path, resp.StatusCode, body, want)
		}
	}
	for path, want := range map[string]string{"/image/arm64/vmlinuz": "ARM-KERNEL", "/image/arm64/initramfs.cpio.zst": "ARM-INITRD",
		"/image/vmlinuz": "X86-KERNEL", "/image/amd64/vmlinuz": "no image of architecture", "/image/arm64/report.json": "unknown image file"} {
		if _, body := f.get(t, path); !strings.Contains(body, want) {
			t.Errorf("%s = %q, want %q", path, body, want)
		}
	}

	noArm := archFixture(t, false)
	resp, body := noArm.get(t, "/ipxe/52-54-00-00-00-0a")
	if resp.StatusCode != 503 || !strings.Contains(body, "no arm64 CURE image on this coordinator (--image-dir-arm64, make image-arm64)") {
		t.Errorf("arm64 node without an arm64 image: %d\n%s", resp.StatusCode, body)
	}
}
