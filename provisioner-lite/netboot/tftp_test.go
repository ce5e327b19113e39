package netboot

import (
	"bytes"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// fixtureDir holds fake iPXE builds (random bytes: the server must not care).
func fixtureDir(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{}
	for name, size := range map[string]int{"snponly.efi": 173792, "undionly.kpxe": 74213} {
		b := make([]byte, size)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	// Something the server must never hand out.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, files
}

func startTFTP(t *testing.T, files *Files, lim TFTPLimits) (*TFTP, string, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	srv, err := NewTFTP(files, lim, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(conn) }()
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return srv, conn.LocalAddr().String(), lb
}

func tftpClient(t *testing.T, addr string) *tftp.Client {
	t.Helper()
	c, err := tftp.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTimeout(2 * time.Second)
	return c
}

// A real TFTP client fetches each build whole, with the block size and
// transfer size options negotiated.
func TestTFTPServesBuilds(t *testing.T) {
	dir, want := fixtureDir(t)
	files, err := LoadFiles(dir, []string{"snponly.efi", "undionly.kpxe", "ipxe.efi"})
	if err != nil {
		t.Fatal(err)
	}
	if m := files.Missing(); len(m) != 1 || m[0] != "ipxe.efi" {
		t.Errorf("Missing = %v, want [ipxe.efi]", m)
	}
	_, addr, logs := startTFTP(t, files, TFTPLimits{})
	for _, tc := range []struct {
		req, name string
		blksize   int
	}{{"snponly.efi", "snponly.efi", 1468}, {"/undionly.kpxe", "undionly.kpxe", 0}, {"snponly.efi", "snponly.efi", 512}} {
		c := tftpClient(t, addr)
		if tc.blksize > 0 {
			c.SetBlockSize(tc.blksize)
		}
		c.RequestTSize(true)
		wt, err := c.Receive(tc.req, "octet")
		if err != nil {
			t.Fatalf("%s: %v", tc.req, err)
		}
		size, ok := wt.(tftp.IncomingTransfer).Size()
		if !ok || size != int64(len(want[tc.name])) {
			t.Errorf("%s: tsize %d (sent %v), want %d", tc.req, size, ok, len(want[tc.name]))
		}
		var got bytes.Buffer
		if _, err := wt.WriteTo(&got); err != nil {
			t.Fatalf("%s: %v", tc.req, err)
		}
		if !bytes.Equal(got.Bytes(), want[tc.name]) {
			t.Errorf("%s: %d bytes differ from the file's %d", tc.req, got.Len(), len(want[tc.name]))
		}
	}
	if !strings.Contains(logs.String(), "tftp: sent") {
		t.Errorf("no transfer logged:\n%s", logs)
	}
}

// Only the loaded builds exist; nothing reaches the file system, writes are
// refused.
func TestTFTPRefusesEverythingElse(t *testing.T) {
	dir, _ := fixtureDir(t)
	files, err := LoadFiles(dir, []string{"snponly.efi"})
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _ := startTFTP(t, files, TFTPLimits{})
	for _, name := range []string{"../secret", "/../secret", filepath.Join(dir, "snponly.efi"), "undionly.kpxe", "//snponly.efi", "snponly.efi/", "SNPONLY.EFI", ""} {
		c := tftpClient(t, addr)
		c.SetRetries(1)
		wt, err := c.Receive(name, "octet")
		if err == nil {
			var b bytes.Buffer
			_, err = wt.WriteTo(&b)
		}
		if err == nil {
			t.Errorf("%q was served", name)
		}
	}
	c := tftpClient(t, addr)
	c.SetRetries(1)
	rf, err := c.Send("snponly.efi", "octet")
	if err == nil {
		_, err = rf.ReadFrom(strings.NewReader("overwrite"))
	}
	if err == nil {
		t.Error("a write request was accepted")
	}
	// The build served is still the original.
	if _, b, ok := files.Lookup("snponly.efi"); !ok || len(b) != 173792 {
		t.Errorf("the build changed: %d bytes", len(b))
	}
}

func TestLoadFilesRefuses(t *testing.T) {
	dir, _ := fixtureDir(t)
	if _, err := LoadFiles(dir, []string{"../secret"}); err == nil {
		t.Error("a path outside the directory was accepted as a build name")
	}
	if _, err := LoadFiles(t.TempDir(), []string{"snponly.efi"}); err == nil || !strings.Contains(err.Error(), "no iPXE build") {
		t.Errorf("empty directory: err = %v", err)
	}
	big := filepath.Join(dir, "big.efi")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFiles(dir, []string{"big.efi"}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("oversized build: err = %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.efi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFiles(dir, []string{"d.efi"}); err == nil {
		t.Error("a directory was accepted as a build")
	}
}

// UEFI HTTP boot fetches the same builds over HTTP.
func TestFilesHTTP(t *testing.T) {
	dir, want := fixtureDir(t)
	files, err := LoadFiles(dir, []string{"snponly.efi"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/ipxe-bin", files.Handler()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ipxe-bin/snponly.efi")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, want["snponly.efi"]) {
		t.Errorf("GET snponly.efi: %d, %d bytes", resp.StatusCode, len(b))
	}
	for _, p := range []string{"/ipxe-bin/../secret", "/ipxe-bin/undionly.kpxe", "/ipxe-bin/"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("GET %s: 200", p)
		}
	}
}
