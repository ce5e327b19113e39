package hostos

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/builder"
	"github.com/cure-oss/cure/builder/spec"
	"github.com/cure-oss/cure/qemu-test/hostos/hostdisk"
)

type callback struct {
	auth, path string
	form       map[string]string
}

// TestHostOSBootsAndPhonesHome builds the host OS initramfs and disk, writes
// a NoCloud seed into CIDATA with mtools, boots the disk from an emulated
// NVMe drive in QEMU (TCG) and waits for the phone-home POST.
func TestHostOSBootsAndPhonesHome(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and boots QEMU; skipped with -short")
	}
	for _, tool := range []string{"qemu-system-x86_64", "mkfs.vfat", "mcopy", "syslinux"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	kroot, _ := filepath.Abs("../../.cache/kernel/root")
	if _, err := builder.FindKernel(kroot); err != nil {
		t.Skipf("kernel tree missing: %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir := t.TempDir()

	s, err := spec.Load("hostos.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "image")
	if _, err := builder.Build(context.Background(), builder.Options{Spec: s, KernelRoot: kroot, OutDir: img, Log: log}); err != nil {
		t.Fatal(err)
	}
	plan, err := hostdisk.NewPlan(hostdisk.Options{
		Kernel: filepath.Join(img, builder.VmlinuzName), Initrd: filepath.Join(img, builder.ZstName),
		Append: s.Cmdline.Value, FileSizes: hostdisk.StatSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	man, err := hostdisk.Assemble(ctx, plan, filepath.Join(dir, "disk"), hostdisk.ExecRunner, log)
	if err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, "disk", hostdisk.RawName)

	// The callback server; SLIRP shows the host's 127.0.0.1 as 10.0.2.2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan callback, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cb := callback{auth: r.Header.Get("Authorization"), path: r.URL.Path, form: map[string]string{}}
		for k := range r.PostForm {
			cb.form[k] = r.PostForm.Get(k)
		}
		got <- cb
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	// The seed, as tools/firstboot writes it after os_install.
	seed := filepath.Join(dir, "seed")
	os.MkdirAll(seed, 0o755)
	os.WriteFile(filepath.Join(seed, "meta-data"), []byte("instance-id: node-qemu-1\nlocal-hostname: hostos-1\n"), 0o644)
	os.WriteFile(filepath.Join(seed, "user-data"), []byte(fmt.Sprintf(`#cloud-config
hostname: hostos-1
phone_home:
  url: http://10.0.2.2:%d/hostready/node-qemu-1?token=tok-abc123
  post: all
  tries: 20
`, port)), 0o644)
	var cidata hostdisk.PartitionInfo
	for _, p := range man.Partitions {
		if p.Label == hostdisk.CIDataLabel {
			cidata = p
		}
	}
	for _, f := range []string{"meta-data", "user-data"} {
		cmd := exec.Command("mcopy", "-i", fmt.Sprintf("%s@@%d", raw, cidata.Offset), filepath.Join(seed, f), "::"+f)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mcopy %s: %v: %s", f, err, out)
		}
	}

	serial := filepath.Join(dir, "serial.log")
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg", "-m", "512",
		"-nographic", "-no-reboot", "-monitor", "none",
		"-drive", "file="+raw+",if=none,id=d0,format=raw", "-device", "nvme,serial=HOSTOS1,drive=d0",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0", "-device", "virtio-rng-pci",
		"-serial", "file:"+serial)
	start := time.Now()
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() { exited <- qemu.Wait(); close(waited) }()
	defer func() {
		qemu.Process.Kill()
		<-waited
		if t.Failed() {
			b, _ := os.ReadFile(serial)
			t.Logf("serial console:\n%s", b)
		}
	}()

	select {
	case cb := <-got:
		t.Logf("phone_home arrived %.1fs after QEMU start: %+v", time.Since(start).Seconds(), cb)
		if cb.path != "/hostready/node-qemu-1" || cb.auth != "Bearer tok-abc123" {
			t.Errorf("callback path %q auth %q", cb.path, cb.auth)
		}
		if cb.form["instance_id"] != "node-qemu-1" || cb.form["hostname"] != "hostos-1" ||
			len(cb.form["boot_id"]) != 36 || cb.form["uptime_ms"] == "" {
			t.Errorf("callback form = %v", cb.form)
		}
	case err := <-exited:
		t.Fatalf("QEMU exited before phoning home: %v", err)
	case <-ctx.Done():
		t.Fatal("timed out waiting for phone_home")
	}
	// The console shows the host OS's own account of it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(serial)
		if strings.Contains(string(b), "CURE-HOSTOS: level=INFO msg=ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("serial console lacks the CURE-HOSTOS ready line")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}
