package wipe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
)

// diskFill is what the guest's disk holds before the run, repeated.
const diskFill = "OLD-USER-DATA..."

// bootWipeGuest boots the CURE kernel with a throwaway initramfs whose
// /init is internal/qemuinit, loading modules (and what they depend on),
// with a 64 MiB raw image full of diskFill as QEMU drive "d0" for devices
// to attach. It returns the console once the guest reported success, and
// the image's path. It skips without CURE_OUT or under -short; with
// CURE_OUT it needs image/vmlinuz, qemu-system-x86_64 and the kernel
// module tree at .cache/kernel/root.
func bootWipeGuest(t *testing.T, cmdline string, modules []string, devices ...string) (console, diskPath string) {
	t.Helper()
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

	mods, err := resolveModules(modDir, modules...)
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, initBin, mods)

	diskPath = filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(diskPath, bytes.Repeat([]byte(diskFill), 64<<20/len(diskFill)), 0o644); err != nil {
		t.Fatal(err)
	}
	consolePath := filepath.Join(dir, "console.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{
		"-machine", "q35", "-cpu", "max", "-m", "512", "-smp", "1",
		"-display", "none", "-no-reboot", "-serial", "file:" + consolePath, "-monitor", "none",
		"-kernel", kernel, "-initrd", initrd,
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 loglevel=4 " + cmdline),
		"-drive", "file=" + diskPath + ",if=none,id=d0,format=raw",
	}
	cmd := exec.CommandContext(ctx, qemu, append(args, devices...)...)
	bootStart := time.Now()
	b, err := cmd.CombinedOutput()
	text, _ := os.ReadFile(consolePath)
	console = string(text)
	if err != nil {
		logConsole(t, console)
		t.Fatalf("qemu: %v\n%s", err, b)
	}
	t.Logf("QEMU ran %s", time.Since(bootStart).Round(time.Millisecond))
	if !strings.Contains(console, "CURE-WIPE-DONE ok") {
		logConsole(t, console)
		t.Fatal("guest did not report success")
	}
	for _, line := range strings.Split(console, "\n") {
		if strings.HasPrefix(line, "CURE-WIPE step=") {
			t.Log(strings.TrimSpace(line))
		}
	}
	return console, diskPath
}

// logConsole logs the tail of the console for a failed check.
func logConsole(t *testing.T, console string) {
	t.Helper()
	if len(console) > 8000 {
		console = console[len(console)-8000:]
	}
	t.Logf("console (tail):\n%s", console)
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
