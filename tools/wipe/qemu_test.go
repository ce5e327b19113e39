package wipe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
)

// TestWipeQEMUFormat boots the CURE kernel with a throwaway initramfs whose
// /init (internal/qemuinit) runs the real probe/plan/execute path against
// QEMU's emulated NVMe controller, then checks the console and the disk
// image. Needs CURE_OUT (for image/vmlinuz), qemu-system-x86_64 and the
// kernel module tree at .cache/kernel/root.
func TestWipeQEMUFormat(t *testing.T) {
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

	start := time.Now()
	initBin := filepath.Join(dir, "init")
	// Default flags so the build cache from compiling this test is reused.
	build := exec.Command(goTool(), "build", "-o", initBin, "./tools/wipe/internal/qemuinit")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build qemuinit: %v\n%s", err, b)
	}
	t.Logf("helper built in %s", time.Since(start).Round(time.Millisecond))

	mods, err := resolveModules(modDir, "crct10dif_generic", "crc64_rocksoft_generic", "nvme")
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, initBin, mods)

	diskPath := filepath.Join(dir, "disk.raw")
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
		"-append", "console=ttyS0 panic=-1 loglevel=4",
		"-drive", "file="+diskPath+",if=none,id=d0,format=raw",
		"-device", "nvme,serial=CUREWIPE0001,drive=d0",
	)
	bootStart := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		logConsole(t, console)
		t.Fatalf("qemu: %v\n%s", err, b)
	}
	t.Logf("QEMU ran %s", time.Since(bootStart).Round(time.Millisecond))
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
	// QEMU rejects the security and sanitize commands with its real status.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`step=opal-discovery notcg=true err=.*nvme admin opcode 0x82: Invalid Command Opcode \(SCT 0x0 SC 0x01, status 0x4001\)`),
		regexp.MustCompile(`step=opal-ioctl notcg=true err=opal get status: ioctl 0x800870ec: kernel reports no Opal support`),
		regexp.MustCompile(`step=sanitize err=sanitize \(block erase\): nvme admin opcode 0x84: Invalid Command Opcode \(SCT 0x0 SC 0x01, status 0x4001\)`),
		regexp.MustCompile(`step=plan-crypto-erase err=.*no erase method satisfies policy crypto-erase`),
		regexp.MustCompile(`step=guard-audit err=wipe refused: mode audit never writes`),
		regexp.MustCompile(`step=plan method=nvme-format-user-data`),
	} {
		if !want.MatchString(con) {
			logConsole(t, console)
			t.Errorf("console lacks %s", want)
		}
	}
	var res Result
	for _, line := range strings.Split(con, "\n") {
		if j, ok := strings.CutPrefix(strings.TrimSpace(line), "CURE-WIPE-RESULT "); ok {
			if err := json.Unmarshal([]byte(j), &res); err != nil {
				t.Fatalf("result line: %v", err)
			}
		}
	}
	if !res.Verified || res.Method != MethodFormatUserData || res.Serial != "CUREWIPE0001" || len(res.Attempts) != 1 || res.Attempts[0].Error != "" {
		t.Fatalf("result %+v", res)
	}
	ev := strings.Join(res.Evidence, "\n")
	if strings.Contains(ev, "STILL PRESENT") || strings.Count(ev, "marker gone, now all zeros") != 18 {
		t.Errorf("evidence:\n%s", ev)
	}
	t.Logf("format NVM took %s (verify included: %s); evidence:\n%s", res.Erase, res.Total, ev)

	// Independent of the guest: the image file no longer holds the marker
	// token nor the data that was there before.
	img, err := os.ReadFile(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	token, err := hex.DecodeString(res.Marker)
	if err != nil || len(token) != 16 {
		t.Fatalf("marker %q", res.Marker)
	}
	if bytes.Contains(img, token) {
		t.Error("marker token still in the disk image after Format NVM")
	}
	if bytes.Contains(img, []byte("OLD-USER-DATA")) {
		t.Error("pre-existing data survived Format NVM")
	}
	if bytes.Count(img[:1<<20], []byte{0}) != 1<<20 {
		t.Error("first MiB of the image is not zero")
	}
}

func logConsole(t *testing.T, path string) {
	b, _ := os.ReadFile(path)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	t.Logf("console (tail):\n%s", b)
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func repoRoot(t *testing.T) string {
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) {
			return d
		}
		if d == filepath.Dir(d) {
			t.Fatal("no go.mod above the test directory")
		}
	}
}

func moduleDir(t *testing.T, base string) string {
	entries, err := os.ReadDir(base)
	if err != nil || len(entries) != 1 {
		t.Fatalf("%s: want exactly one kernel version directory (run make deps): %v", base, err)
	}
	return filepath.Join(base, entries[0].Name())
}

// resolveModules returns the .ko paths needed for names, dependencies
// first, from each module's modinfo "depends=" (the tree has no modules.dep).
func resolveModules(dir string, names ...string) ([]string, error) {
	paths := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ko") {
			paths[modName(strings.TrimSuffix(d.Name(), ".ko"))] = p
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string) error
	visit = func(n string) error {
		n = modName(n)
		if seen[n] {
			return nil
		}
		seen[n] = true
		p, ok := paths[n]
		if !ok {
			return fmt.Errorf("module %s not found under %s", n, dir)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, []byte("\x00depends=")); i >= 0 {
			rest := b[i+9:]
			deps := string(rest[:bytes.IndexByte(rest, 0)])
			for _, d := range strings.Split(deps, ",") {
				if d != "" {
					if err := visit(d); err != nil {
						return err
					}
				}
			}
		}
		order = append(order, p)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// writeInitramfs writes a newc archive: /init, the modules under
// /lib/modules with /modules.order listing them, and /dev/console so the
// kernel gives init a console before devtmpfs is mounted.
func writeInitramfs(t *testing.T, path, initBin string, mods []string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	w := cpio.Newc.Writer(bw)
	initData, err := os.ReadFile(initBin)
	if err != nil {
		t.Fatal(err)
	}
	recs := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.Directory("proc", 0o755),
		cpio.Directory("sys", 0o755),
		cpio.Directory("lib", 0o755),
		cpio.Directory("lib/modules", 0o755),
		cpio.StaticFile("init", string(initData), 0o755),
	}
	var order []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		name := "lib/modules/" + filepath.Base(m)
		recs = append(recs, cpio.StaticFile(name, string(b), 0o644))
		order = append(order, "/"+name)
	}
	recs = append(recs, cpio.StaticFile("modules.order", strings.Join(order, "\n")+"\n", 0o644))
	if err := cpio.WriteRecords(w, recs); err != nil {
		t.Fatal(err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
}
