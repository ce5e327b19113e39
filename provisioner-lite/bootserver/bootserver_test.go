package bootserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/chunklist"
	"github.com/cure-oss/cure/tools/diskimage"
)

type readyCall struct {
	node, token, peer string
	form              url.Values
}

// fakeCoordinator answers from fixed tables and records HostReady calls.
type fakeCoordinator struct {
	decisions map[string]bootgate.Decision // by normalised MAC
	tokens    map[string]string            // token -> node
	mu        sync.Mutex
	ready     []readyCall
	macsSeen  []string
	peers     []string
	// formReads counts readForm calls: the body must not be read before the token is accepted.
	formReads int
}

func (f *fakeCoordinator) BootDecision(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	f.mu.Lock()
	f.macsSeen = append(f.macsSeen, mac)
	f.peers = append(f.peers, peer)
	f.mu.Unlock()
	d, ok := f.decisions[mac]
	if !ok {
		return bootgate.Decision{}, fmt.Errorf("MAC %s: %w", mac, bootgate.ErrUnknownNode)
	}
	return d, nil
}

func (f *fakeCoordinator) HostReady(ctx context.Context, nodeID, token, peer string, readForm func() (url.Values, error)) error {
	if f.tokens[token] != nodeID {
		return fmt.Errorf("token for node %s: %w", nodeID, bootgate.ErrUnauthorized)
	}
	f.mu.Lock()
	f.formReads++
	f.mu.Unlock()
	form, err := readForm()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.ready = append(f.ready, readyCall{nodeID, token, peer, form})
	f.mu.Unlock()
	return nil
}

type fixture struct {
	srv     *httptest.Server
	coord   *fakeCoordinator
	imgDir  string
	artDir  string
	logBuf  *bytes.Buffer
	baseURL string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{imgDir: t.TempDir(), artDir: t.TempDir(), logBuf: &bytes.Buffer{}, baseURL: "http://10.0.2.2:8080/"}
	for name, body := range map[string]string{Kernel: "KERNEL-BYTES", InitramfsGzip: "GZIP-INITRAMFS"} {
		if err := os.WriteFile(filepath.Join(f.imgDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.coord = &fakeCoordinator{
		decisions: map[string]bootgate.Decision{
			"52:54:00:12:34:56": {Boot: true, Cmdline: "cure.token=tok123 cure.node=n1 cure.coordinator=10.0.2.2:9443", Reason: "run r1: provision"},
			"52:54:00:12:34:57": {Boot: false, Reason: "no active run for n2"},
		},
		tokens: map[string]string{"good-token": "n1"},
	}
	s, err := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL,
		Logger: slog.New(slog.NewTextHandler(f.logBuf, nil))}, f.coord)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func (f *fixture) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	return f.do(t, req)
}

func TestGenericScript(t *testing.T) {
	f := newFixture(t)
	resp, body := f.get(t, "/boot.ipxe")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !strings.HasPrefix(body, "#!ipxe\n") {
		t.Fatalf("script does not start with #!ipxe:\n%s", body)
	}
	for _, want := range []string{
		"chain --autofree http://10.0.2.2:8080/ipxe/${netX/mac:hexhyp}?arch=${buildarch} || goto failed\n",
		"dhcp ||\n", "goto retry\n", "iseq ${cure_try} 5 && goto give_up ||\n", "inc cure_try\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("generic script lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "8080//ipxe") {
		t.Error("BaseURL trailing slash doubled")
	}
	// The line after a successful chain must be exit: a per-node `exit` falls through to disk.
	if !strings.Contains(body, "|| goto failed\n# The per-node script returned (it said exit): fall through to the next boot device.\nexit\n") {
		t.Errorf("no exit after chain:\n%s", body)
	}
}

func TestPerMACBoot(t *testing.T) {
	f := newFixture(t)
	resp, body := f.get(t, "/ipxe/52-54-00-12-34-56")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	want := "#!ipxe\necho CURE: run r1: provision\n" +
		"kernel http://10.0.2.2:8080/image/vmlinuz initrd=initramfs.cpio.gz console=ttyS0 panic=-1 cure.token=tok123 cure.node=n1 cure.coordinator=10.0.2.2:9443\n" +
		"initrd http://10.0.2.2:8080/image/initramfs.cpio.gz\nboot\n"
	if body != want {
		t.Fatalf("per-MAC script:\n%s\nwant:\n%s", body, want)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q", resp.Header.Get("Cache-Control"))
	}
	if got := f.coord.macsSeen; len(got) != 1 || got[0] != "52:54:00:12:34:56" {
		t.Errorf("coordinator saw MACs %v, want the normalised colon form", got)
	}
	if got := f.coord.peers; len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("coordinator saw peers %v, want the client's IP without port", got)
	}
}

// With every compression built, the LZ4 initramfs is booted (the kernel
// unpacks it fastest) and served.
func TestPerMACPrefersLZ4(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.imgDir, InitramfsZstd), []byte("Z"), 0o644)
	os.WriteFile(filepath.Join(f.imgDir, InitramfsLZ4), []byte("LZ4-INITRAMFS"), 0o644)
	_, body := f.get(t, "/ipxe/52-54-00-12-34-56")
	if !strings.Contains(body, "initrd=initramfs.cpio.lz4 ") || !strings.Contains(body, "initrd http://10.0.2.2:8080/image/initramfs.cpio.lz4\n") {
		t.Fatalf("image with lz4, gzip and zstd:\n%s", body)
	}
	if resp, got := f.get(t, "/image/initramfs.cpio.lz4"); resp.StatusCode != http.StatusOK || got != "LZ4-INITRAMFS" {
		t.Fatalf("serving the lz4 initramfs: %d %q", resp.StatusCode, got)
	}
}

func TestPerMACZstdFallback(t *testing.T) {
	f := newFixture(t)
	os.Remove(filepath.Join(f.imgDir, InitramfsGzip))
	os.WriteFile(filepath.Join(f.imgDir, InitramfsZstd), []byte("Z"), 0o644)
	_, body := f.get(t, "/ipxe/52-54-00-12-34-56")
	if !strings.Contains(body, "initrd=initramfs.cpio.zst ") || !strings.Contains(body, "initrd http://10.0.2.2:8080/image/initramfs.cpio.zst\n") {
		t.Fatalf("zstd-only image:\n%s", body)
	}
	os.Remove(filepath.Join(f.imgDir, InitramfsZstd))
	resp, body := f.get(t, "/ipxe/52-54-00-12-34-56")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "not built") || !strings.HasSuffix(body, "exit\n") {
		t.Fatalf("missing image: %d\n%s", resp.StatusCode, body)
	}
}

func TestPerMACExitAndUnknown(t *testing.T) {
	f := newFixture(t)
	resp, body := f.get(t, "/ipxe/52-54-00-12-34-57")
	if resp.StatusCode != 200 || body != "#!ipxe\necho CURE: no active run for n2, booting from the next device\nsleep 2\nexit\n" {
		t.Fatalf("exit decision: %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "kernel") {
		t.Fatal("exit decision loads a kernel")
	}

	resp, body = f.get(t, "/ipxe/52-54-00-99-99-99")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown MAC: status %d, want 404", resp.StatusCode)
	}
	if !strings.HasPrefix(body, "#!ipxe\necho CURE: MAC 52:54:00:99:99:99 is not in the inventory") || !strings.HasSuffix(body, "exit\n") {
		t.Fatalf("unknown MAC script:\n%s", body)
	}

	resp, body = f.get(t, "/ipxe/not-a-mac")
	if resp.StatusCode != http.StatusBadRequest || !strings.HasSuffix(body, "exit\n") {
		t.Fatalf("bad MAC: %d\n%s", resp.StatusCode, body)
	}
}

func TestPerMACUnsafeCmdline(t *testing.T) {
	f := newFixture(t)
	f.coord.decisions["52:54:00:12:34:58"] = bootgate.Decision{Boot: true, Cmdline: "a=1\nshell", Reason: "x ${evil}"}
	resp, body := f.get(t, "/ipxe/52:54:00:12:34:58")
	if resp.StatusCode != 500 || strings.Contains(body, "shell") || strings.Contains(body, "\nkernel ") {
		t.Fatalf("unsafe cmdline: %d\n%s", resp.StatusCode, body)
	}
	if got := ipxeText("x ${evil}\nline"); got != "x __evil__line" {
		t.Fatalf("ipxeText = %q", got)
	}
}

func TestImages(t *testing.T) {
	f := newFixture(t)
	resp, body := f.get(t, "/image/vmlinuz")
	if resp.StatusCode != 200 || body != "KERNEL-BYTES" {
		t.Fatalf("vmlinuz: %d %q", resp.StatusCode, body)
	}
	if resp, _ := f.get(t, "/image/initramfs.cpio.zst"); resp.StatusCode != 404 {
		t.Fatalf("missing zst: %d, want 404", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/image/..%2fetc%2fpasswd"); resp.StatusCode != 404 {
		t.Fatalf("traversal attempt: %d, want 404", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/image/other"); resp.StatusCode != 404 {
		t.Fatalf("unknown image name: %d, want 404", resp.StatusCode)
	}
}

func importBytes(t *testing.T, dir string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a")
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	h, n, err := ImportArtifact(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(content)) {
		t.Fatalf("size %d, want %d", n, len(content))
	}
	return h
}

func TestArtifactsRangeAndETag(t *testing.T) {
	f := newFixture(t)
	content := bytes.Repeat([]byte("0123456789"), 1000)
	h := importBytes(t, f.artDir, content)

	req, _ := http.NewRequest("GET", f.srv.URL+"/artifacts/sha256/"+h, nil)
	req.Header.Set("Range", "bytes=100-149")
	resp, body := f.do(t, req)
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("Range: status %d, want 206", resp.StatusCode)
	}
	if body != string(content[100:150]) {
		t.Fatalf("Range body = %q", body)
	}
	if cr := resp.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes 100-149/%d", len(content)) {
		t.Fatalf("Content-Range = %q", cr)
	}
	if et := resp.Header.Get("ETag"); et != `"`+h+`"` {
		t.Fatalf("ETag = %q, want the hash", et)
	}

	// Resume from an offset (what a restarted image download does).
	req, _ = http.NewRequest("GET", f.srv.URL+"/artifacts/sha256/"+h, nil)
	req.Header.Set("Range", "bytes=9990-")
	req.Header.Set("If-Range", `"`+h+`"`)
	resp, body = f.do(t, req)
	if resp.StatusCode != 206 || body != "0123456789" {
		t.Fatalf("open-ended Range: %d %q", resp.StatusCode, body)
	}

	// Full GET hashes to its name.
	resp, body = f.get(t, "/artifacts/sha256/"+h)
	sum := sha256.Sum256([]byte(body))
	if resp.StatusCode != 200 || hex.EncodeToString(sum[:]) != h {
		t.Fatalf("full GET: %d, hash mismatch", resp.StatusCode)
	}

	// HEAD gives the size without a body.
	req, _ = http.NewRequest("HEAD", f.srv.URL+"/artifacts/sha256/"+h, nil)
	resp, body = f.do(t, req)
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(content)) || body != "" {
		t.Fatalf("HEAD: %d len %d body %q", resp.StatusCode, resp.ContentLength, body)
	}

	// Conditional GET with the ETag: 304.
	req, _ = http.NewRequest("GET", f.srv.URL+"/artifacts/sha256/"+h, nil)
	req.Header.Set("If-None-Match", `"`+h+`"`)
	if resp, _ := f.do(t, req); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d, want 304", resp.StatusCode)
	}
}

func TestArtifactNotFoundAndBadName(t *testing.T) {
	f := newFixture(t)
	missing := strings.Repeat("ab", 32)
	if resp, _ := f.get(t, "/artifacts/sha256/"+missing); resp.StatusCode != 404 {
		t.Fatalf("missing artifact: %d, want 404", resp.StatusCode)
	}
	for _, bad := range []string{"xyz", strings.Repeat("g", 64), strings.Repeat("a", 63), "..%2f..%2fetc%2fpasswd"} {
		if resp, _ := f.get(t, "/artifacts/sha256/"+bad); resp.StatusCode != 400 {
			t.Errorf("artifact name %q: %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestImportArtifactIdempotent(t *testing.T) {
	dir := t.TempDir()
	content := []byte("os image bytes")
	h1 := importBytes(t, dir, content)
	h2 := importBytes(t, dir, content)
	sum := sha256.Sum256(content)
	if h1 != h2 || h1 != hex.EncodeToString(sum[:]) {
		t.Fatalf("hashes %s %s, want %x", h1, h2, sum)
	}
	got, err := os.ReadFile(ArtifactPath(dir, h1))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("stored artifact: %q %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	if len(entries) != 1 {
		t.Fatalf("store holds %d entries (temp files left?), want 1", len(entries))
	}
	if _, _, err := ImportArtifact(dir, filepath.Join(dir, "nope")); err == nil {
		t.Fatal("import of a missing file succeeded")
	}
	if _, _, err := ImportArtifact(dir, dir); err == nil {
		t.Fatal("import of a directory succeeded")
	}
}

func TestReady(t *testing.T) {
	f := newFixture(t)
	// cloud-init phone_home: form body, token in the query.
	form := url.Values{"instance_id": {"iid-n1"}, "hostname": {"n1"}, "pub_key_ed25519": {"ssh-ed25519 AAAA"}}
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/nodes/n1/ready?token=good-token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, body := f.do(t, req); resp.StatusCode != 200 {
		t.Fatalf("ready with query token: %d %s", resp.StatusCode, body)
	}
	// hostready: bearer header.
	req, _ = http.NewRequest("POST", f.srv.URL+"/v1/nodes/n1/ready", strings.NewReader("hostname=n1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer good-token")
	if resp, body := f.do(t, req); resp.StatusCode != 200 {
		t.Fatalf("ready with bearer token: %d %s", resp.StatusCode, body)
	}
	if len(f.coord.ready) != 2 {
		t.Fatalf("HostReady called %d times, want 2", len(f.coord.ready))
	}
	first := f.coord.ready[0]
	if first.node != "n1" || first.token != "good-token" || first.form.Get("instance_id") != "iid-n1" || first.form.Get("pub_key_ed25519") != "ssh-ed25519 AAAA" {
		t.Fatalf("first call = %+v", first)
	}
	if _, leaked := first.form["token"]; leaked {
		t.Fatal("token passed on inside the form")
	}
	if strings.Contains(f.logBuf.String(), "good-token") {
		t.Fatal("token written to the log")
	}
}

func TestReadyUnauthorized(t *testing.T) {
	f := newFixture(t)
	for name, mk := range map[string]func() *http.Request{
		"wrong token": func() *http.Request {
			r, _ := http.NewRequest("POST", f.srv.URL+"/v1/nodes/n1/ready?token=bad", nil)
			return r
		},
		"token of another node": func() *http.Request {
			r, _ := http.NewRequest("POST", f.srv.URL+"/v1/nodes/n2/ready", nil)
			r.Header.Set("Authorization", "Bearer good-token")
			return r
		},
		"no token": func() *http.Request {
			r, _ := http.NewRequest("POST", f.srv.URL+"/v1/nodes/n1/ready", nil)
			return r
		},
		"basic auth": func() *http.Request {
			r, _ := http.NewRequest("POST", f.srv.URL+"/v1/nodes/n1/ready", nil)
			r.SetBasicAuth("n1", "good-token")
			return r
		},
	} {
		resp, _ := f.do(t, mk())
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: status %d (WWW-Authenticate %q), want 401", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if len(f.coord.ready) != 0 {
		t.Fatalf("HostReady succeeded %d times with bad credentials", len(f.coord.ready))
	}
	if resp, _ := f.get(t, "/v1/nodes/n1/ready"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET on ready: %d, want 405", resp.StatusCode)
	}
}

type storeErrCoordinator struct{ fakeCoordinator }

func (*storeErrCoordinator) HostReady(ctx context.Context, nodeID, token, peer string, readForm func() (url.Values, error)) error {
	return fmt.Errorf("token: %w", store.ErrExpired)
}

func TestReadyExpiredStoreToken(t *testing.T) {
	s, err := New(Config{ImageDir: t.TempDir(), ArtifactDir: t.TempDir(), BaseURL: "http://x"}, &storeErrCoordinator{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/nodes/n1/ready?token=t", nil))
	if rec.Code != 401 {
		t.Fatalf("expired token: %d, want 401", rec.Code)
	}
}

func TestRequestLog(t *testing.T) {
	f := newFixture(t)
	f.get(t, "/image/vmlinuz")
	line := f.logBuf.String()
	for _, want := range []string{"method=GET", "path=/image/vmlinuz", "status=200", "bytes=12", "duration=", "remote=127.0.0.1:"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	c := &fakeCoordinator{}
	for name, cfg := range map[string]Config{
		"no image dir":    {ArtifactDir: "a", BaseURL: "http://x"},
		"no artifact dir": {ImageDir: "i", BaseURL: "http://x"},
		"relative base":   {ImageDir: "i", ArtifactDir: "a", BaseURL: "10.0.2.2:8080"},
		"ftp base":        {ImageDir: "i", ArtifactDir: "a", BaseURL: "ftp://x"},
		"dollar in base":  {ImageDir: "i", ArtifactDir: "a", BaseURL: "http://x/${y}"},
	} {
		if _, err := New(cfg, c); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := New(Config{ImageDir: "i", ArtifactDir: "a", BaseURL: "http://x"}, nil); err == nil {
		t.Error("nil coordinator accepted")
	}
}

// The iPXE builds are served under /ipxe-bin/ only when configured, and
// the handler sees the name without the prefix.
func TestIPXEBuildsRoute(t *testing.T) {
	f := newFixture(t)
	resp, _ := f.get(t, "/ipxe-bin/snponly.efi")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unconfigured /ipxe-bin: %d, want 404", resp.StatusCode)
	}
	var seen []string
	s, err := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.NewTextHandler(f.logBuf, nil)),
		IPXEBuilds: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = append(seen, r.URL.Path)
			io.WriteString(w, "EFI")
		})}, f.coord)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	r, err := http.Get(srv.URL + "/ipxe-bin/snponly.efi")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "EFI" || len(seen) != 1 || seen[0] != "/snponly.efi" {
		t.Errorf("GET /ipxe-bin/snponly.efi: %q, handler saw %v", b, seen)
	}
	if s.ScriptURL() != "http://10.0.2.2:8080/boot.ipxe" {
		t.Errorf("ScriptURL = %s", s.ScriptURL())
	}
}

// The artifact server as the runner's image writer meets it: the image and
// its chunk list from the store, the list fetched and bound, the image
// striped over 4 Range connections with If-Range on the hash ETag, every
// chunk verified before it is written.
func TestArtifactsServeChunkedStripedWrite(t *testing.T) {
	f := newFixture(t)
	img := make([]byte, 9<<20+4321)
	for i := range img {
		img[i] = byte(i*7 + i>>12)
	}
	h := importBytes(t, f.artDir, img)
	l, err := chunklist.Build(bytes.NewReader(img), chunklist.BLAKE3, chunklist.DefaultChunk)
	if err != nil {
		t.Fatal(err)
	}
	lh := importBytes(t, f.artDir, l.Marshal())
	target := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := diskimage.Write(context.Background(), diskimage.Options{
		URL: f.srv.URL + "/artifacts/sha256/" + h, SHA256: h, Size: int64(len(img)), Format: diskimage.FormatRaw, Target: target,
		ChunksURL: f.srv.URL + "/artifacts/sha256/" + lh, ChunksSHA256: lh, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	if !bytes.Equal(got, img) || res.Verification != "chunked-blake3-1MiB" || res.Connections != 4 {
		t.Fatalf("write: exact %v, verification %q, connections %d", bytes.Equal(got, img), res.Verification, res.Connections)
	}
}
