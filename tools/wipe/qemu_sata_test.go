package wipe

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWipeQEMUSATA boots the CURE kernel with internal/qemuinit in SATA
// mode against QEMU's AHCI disk: IDENTIFY DEVICE goes through the real
// SG_IO ATA PASS-THROUGH (16) path and libata's SAT translation, and the
// planner judges the real answer. QEMU's IDE emulation has no Security
// feature set, so the expected outcome is a refusal that quotes the
// drive's own words 82 and 128. Needs what TestWipeQEMUFormat needs.
func TestWipeQEMUSATA(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	out := os.Getenv("CURE_OUT")
	if out == "" {
		t.Skip("CURE_OUT not set")
	}
	kernel := filepath.Join(out, "image/vmlinuz")
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("CURE_OUT is set but the kernel is missing: %v", err)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64: %v", err)
	}
	root := repoRoot(t)
	modDir := moduleDir(t, filepath.Join(root, ".cache/kernel/root/lib/modules"))
	dir := t.TempDir()

	initBin := filepath.Join(dir, "init")
	build := exec.Command(goTool(), "build", "-o", initBin, "./tools/wipe/internal/qemuinit")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build qemuinit: %v\n%s", err, b)
	}
	// ahci pulls libahci and libata, sd_mod scsi_mod; the CRC modules are
	// soft dependencies resolveModules cannot see.
	mods, err := resolveModules(modDir, "crct10dif_generic", "crc64_rocksoft_generic", "ahci", "sd_mod")
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, initBin, mods)

	diskPath := filepath.Join(dir, "sata.raw")
	if err := os.WriteFile(diskPath, bytes.Repeat([]byte("OLD-USER-DATA..."), 64<<20/16), 0o644); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(dir, "console.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "q35", "-cpu", "max", "-m", "512", "-smp", "1",
		"-display", "none", "-no-reboot", "-serial", "file:"+console, "-monitor", "none",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 cure.wipetest=sata",
		"-drive", "file="+diskPath+",if=none,id=d0,format=raw",
		"-device", "ahci,id=sata0",
		"-device", "ide-hd,bus=sata0.0,drive=d0,serial=CUREWIPESATA1,model=CURE QEMU SATA",
	)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		logConsole(t, console)
		t.Fatalf("qemu: %v\n%s", err, b)
	}
	t.Logf("QEMU ran %s", time.Since(start).Round(time.Millisecond))
	text, _ := os.ReadFile(console)
	con := string(text)
	if !strings.Contains(con, "CURE-WIPE-DONE ok") {
		logConsole(t, console)
		t.Fatal("guest did not report success")
	}
	for _, line := range strings.Split(con, "\n") {
		if strings.HasPrefix(line, "CURE-WIPE step=") {
			t.Log(strings.TrimSpace(line))
		}
	}
	for _, want := range []*regexp.Regexp{
		// Selected by serial: blockdev read it from sysfs (VPD page 0x80).
		regexp.MustCompile(`step=blockdev name=sda transport=sata serial="CUREWIPESATA1" model="CURE QEMU SATA"`),
		// The serial and model come from our IDENTIFY parse (byte-swapped
		// ATA strings), not from sysfs: the pass-through path worked.
		regexp.MustCompile(`step=ata-identify transport=sata model="CURE QEMU SATA" serial="CUREWIPESATA1" sectors=131072 word82=0x[0-9a-f]{4} word128=0x0000 state="SEC0 \(not supported\)"`),
		// libata's answer to a command the drive aborts, decoded down to
		// the ATA error register (Debian 12's kernel uses the pre-6.11
		// fixed-format offsets).
		regexp.MustCompile(`step=ata-abort aborted=true err=ATA SECURITY SET PASSWORD \(F1h\): command aborted by the drive: ATA status 0x[0-9a-f]{2} \([A-Z ]*ERR\), error 0x04 \(ABRT\)`),
		regexp.MustCompile(`step=plan-sata err=wipe sda \(serial "CUREWIPESATA1"\): no erase method satisfies policy format .*ata-security-erase: IDENTIFY word 82 0x[0-9a-f]{4}, word 128 0x0000: the drive does not support the Security feature set`),
	} {
		if !want.MatchString(con) {
			logConsole(t, console)
			t.Errorf("console lacks %s", want)
		}
	}
	// Probing wrote nothing.
	img, err := os.ReadFile(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img[:16], []byte("OLD-USER-DATA...")) || !bytes.Equal(img[len(img)-16:], []byte("OLD-USER-DATA...")) {
		t.Error("the disk image changed during a probe")
	}
}
