package vbmc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArm64DirectBoot: an arm64 node is QEMU's virt machine with AAVMF;
// its network boot fetches the per-MAC script as iPXE would and boots its
// kernel and initrd (the command line without initrd=), a script that
// exits boots the installed OS's kernel, and x86 settings are refused.
func TestArm64DirectBoot(t *testing.T) {
	script := "#!ipxe\necho CURE: run r\nkernel http://10.0.2.2:8080/image/arm64/vmlinuz initrd=initramfs.cpio.zst console=ttyAMA0 panic=-1 cure.node=n\n" +
		"initrd http://10.0.2.2:8080/image/arm64/initramfs.cpio.zst\nboot\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ipxe/52-54-00-c0-de-01":
			if r.URL.Query().Get("arch") != "arm64" {
				http.Error(w, "no arch", 400)
			}
			w.Write([]byte(script))
		case "/image/arm64/vmlinuz", "/image/arm64/initramfs.cpio.zst":
			w.Write([]byte(r.URL.Path))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	os.WriteFile(disk, nil, 0o644)
	host := strings.TrimPrefix(srv.URL, "http://")
	cfg := QEMUConfig{Name: "arm", MAC: "52:54:00:c0:de:01", ConsoleLog: filepath.Join(dir, "console"), DiskPath: disk, RunDir: dir, Arch: ArchARM64,
		Direct: &DirectBoot{ScriptURL: srv.URL + "/ipxe/52-54-00-c0-de-01?arch=arm64", Host: host, DiskKernel: "/k", DiskInitrd: "/i", DiskAppend: "console=ttyAMA0"}}
	q, err := NewQEMUMachine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.prepareDirect(context.Background(), BootPxe); err != nil {
		t.Fatal(err)
	}
	args, err := q.Args(BootPxe, filepath.Join(dir, "qmp"))
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"-machine virt -cpu max", "file=" + AAVMFCode, "-kernel " + filepath.Join(dir, "direct-kernel"),
		"-append console=ttyAMA0 panic=-1 cure.node=n"} {
		if !strings.Contains(line, want) {
			t.Errorf("args lack %q:\n%s", want, line)
		}
	}
	if q.cfg.Binary != "qemu-system-aarch64" || q.mode != ModeUEFI || strings.Contains(line, "bootindex") {
		t.Errorf("binary %q mode %q, args %s", q.cfg.Binary, q.mode, line)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "direct-initrd")); string(b) != "/image/arm64/initramfs.cpio.zst" {
		t.Errorf("initrd fetched = %q", b)
	}
	script = "#!ipxe\necho CURE: nothing to do\nsleep 2\nexit\n"
	if err := q.prepareDirect(context.Background(), BootPxe); err != nil || !slices.Equal(q.direct, []string{"-kernel", "/k", "-initrd", "/i", "-append", "console=ttyAMA0"}) {
		t.Errorf("a script that exits: %v, %v", q.direct, err)
	}
	cfg.TPM = true
	if _, err := NewQEMUMachine(cfg); err == nil || !strings.Contains(err.Error(), "arm64: no TPM") {
		t.Errorf("arm64 with a TPM: %v", err)
	}
	if _, err := NewQEMUMachine(QEMUConfig{Name: "x", MAC: cfg.MAC, ConsoleLog: cfg.ConsoleLog, Arch: "riscv64"}); err == nil || !strings.Contains(err.Error(), `Arch "riscv64"`) {
		t.Errorf("riscv64: %v", err)
	}
}
