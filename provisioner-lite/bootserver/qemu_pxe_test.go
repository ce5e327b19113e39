package bootserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/bootgate"
)

// TestQEMUPXE boots QEMU's own iPXE (SLIRP bootfile) against this server, so the
// scripts are checked by the real interpreter: the generic script, per-MAC boot
// (kernel + initrd + cmdline), per-MAC exit, and the give-up path for an unknown
// MAC. It needs qemu-system-x86_64 and a kernel: CURE_PXE_KERNEL=/path/to/vmlinuz.
func TestQEMUPXE(t *testing.T) {
	kernel := os.Getenv("CURE_PXE_KERNEL")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if kernel == "" || err != nil {
		t.Skip("set CURE_PXE_KERNEL=<vmlinuz> and install qemu-system-x86_64 to run the real-iPXE test")
	}
	imgDir := t.TempDir()
	kb, err := os.ReadFile(kernel)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(imgDir, Kernel), kb, 0o644)
	os.WriteFile(filepath.Join(imgDir, InitramfsGzip), emptyInitramfs(t), 0o644)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	coord := &fakeCoordinator{decisions: map[string]bootgate.Decision{
		"52:54:00:12:34:56": {Boot: true, Cmdline: "cure.token=tok123 cure.node=n1", Reason: "run r1"},
		"52:54:00:12:34:57": {Boot: false, Reason: "no active run for n2"},
	}}
	s, err := New(Config{ImageDir: imgDir, ArtifactDir: t.TempDir(), BaseURL: fmt.Sprintf("http://10.0.2.2:%d", port),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, coord)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	for _, tc := range []struct {
		name, mac string
		want      []string
		timeout   time.Duration
	}{
		{"boot", "52:54:00:12:34:56", []string{"CURE: run r1", "Command line: initrd=initramfs.cpio.gz console=ttyS0 panic=-1 cure.token=tok123 cure.node=n1"}, 3 * time.Minute},
		{"exit", "52:54:00:12:34:57", []string{"CURE: no active run for n2; booting from the next device"}, 2 * time.Minute},
		{"unknown", "52:54:00:12:34:99", []string{"attempt 4/5", "CURE: no per-node script after 5 attempts"}, 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, qemu, "-nographic", "-no-reboot", "-m", "512", "-boot", "n",
				"-netdev", fmt.Sprintf("user,id=n0,bootfile=http://10.0.2.2:%d/boot.ipxe", port),
				"-device", "virtio-net-pci,netdev=n0,mac="+tc.mac, "-device", "virtio-rng-pci")
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			var mu sync.Mutex
			found := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(out)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				closed := false
				for sc.Scan() {
					mu.Lock()
					log.WriteString(sc.Text() + "\n")
					all := true
					for _, w := range tc.want {
						all = all && strings.Contains(log.String(), w)
					}
					mu.Unlock()
					if all && !closed {
						close(found)
						closed = true
					}
				}
			}()
			select {
			case <-found:
			case <-ctx.Done():
			}
			cmd.Process.Kill()
			cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			for _, w := range tc.want {
				if !strings.Contains(log.String(), w) {
					t.Errorf("serial output lacks %q; output:\n%s", w, tail(log.String(), 4000))
				}
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// emptyInitramfs is a gzip'd newc cpio holding only the trailer: the kernel
// unpacks it, finds no init and panics, which is as far as this test needs.
func emptyInitramfs(t *testing.T) []byte {
	name := "TRAILER!!!\x00"
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(name), 0)
	rec := hdr + name
	for len(rec)%4 != 0 {
		rec += "\x00"
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(rec))
	zw.Close()
	return b.Bytes()
}
