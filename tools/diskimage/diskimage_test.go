package diskimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// payload is image-like: runs of zeros (compressible) between random
// sectors, and not a multiple of the block size.
func payload(size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, size)
	for off := 0; off < size; off += 64 << 10 {
		end := min(off+16<<10, size)
		for i := off; i < end; i++ {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

func compress(t testing.TB, format string, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch format {
	case FormatRaw:
		return raw
	case FormatGzip:
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case FormatZstd:
		w, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case FormatXz:
		w, err := xz.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// server serves /<name> from files; mode query parameters shape failures:
// ?chunked=1 omits Content-Length, ?cut=N sends only N bytes (then closes),
// ?status=N answers with that status.
func server(t testing.TB, files map[string][]byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.URL.Query().Get("status"); s != "" {
			code, _ := strconv.Atoi(s)
			http.Error(w, "backend exploded", code)
			return
		}
		b, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		send := b
		if c := r.URL.Query().Get("cut"); c != "" {
			n, _ := strconv.Atoi(c)
			send = b[:n]
		}
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		}
		w.WriteHeader(http.StatusOK)
		w.Write(send)
		if len(send) < len(b) && r.URL.Query().Get("chunked") == "" {
			// Cut the connection mid-body, as a dying server would.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func emptyTarget(t testing.TB) string {
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteRoundTrip(t *testing.T) {
	raw := payload(5<<20 + 12345)
	files := map[string][]byte{}
	for _, f := range []string{FormatRaw, FormatGzip, FormatZstd, FormatXz} {
		files["img."+f] = compress(t, f, raw)
	}
	srv := server(t, files)
	for _, format := range []string{FormatRaw, FormatGzip, FormatZstd, FormatXz} {
		t.Run(format, func(t *testing.T) {
			art := files["img."+format]
			target := emptyTarget(t)
			var calls int
			var last int64
			res, err := Write(context.Background(), Options{
				URL: srv.URL + "/img." + format, SHA256: strings.ToUpper(hexSum(art)), Size: int64(len(art)),
				Format: format, Target: target, BlockSize: 1 << 20,
				Progress: func(n int64) { calls++; last = n },
			})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(target)
			if !bytes.Equal(got, raw) {
				t.Fatalf("target differs from payload (%d vs %d bytes)", len(got), len(raw))
			}
			if res.DownloadedBytes != int64(len(art)) || res.WrittenBytes != int64(len(raw)) {
				t.Errorf("downloaded %d written %d", res.DownloadedBytes, res.WrittenBytes)
			}
			if res.SHA256 != hexSum(art) || !reflect.DeepEqual(res.Readback, digestOf(raw)) {
				t.Errorf("sha256 %s, readback %s, want %s", res.SHA256, res.Readback, digestOf(raw))
			}
			if calls != 6 || last != int64(len(raw)) {
				t.Errorf("progress: %d calls, last %d", calls, last)
			}
			if err := Verify(context.Background(), target, res.Readback); err != nil {
				t.Errorf("verify: %v", err)
			}
		})
	}
}

func TestWriteOverwritesInPlace(t *testing.T) {
	raw := payload(100 << 10)
	srv := server(t, map[string][]byte{"img": raw})
	target := emptyTarget(t)
	old := bytes.Repeat([]byte{0xAA}, 200<<10)
	os.WriteFile(target, old, 0o644)
	if _, err := Write(context.Background(), Options{URL: srv.URL + "/img", SHA256: hexSum(raw), Size: int64(len(raw)), Format: FormatRaw, Target: target}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	if !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], old[len(raw):]) {
		t.Error("regular file was not overwritten in place")
	}
}

func TestWriteFailures(t *testing.T) {
	raw := payload(3 << 20)
	gz := compress(t, FormatGzip, raw)
	zst := compress(t, FormatZstd, raw)
	corrupt := append([]byte(nil), zst...)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0xff
	}
	srv := server(t, map[string][]byte{"raw": raw, "gz": gz, "zst": zst, "corrupt.zst": corrupt})
	u := srv.URL

	tests := []struct {
		name    string
		o       Options
		wantErr string
		touched bool // the target was written, so its start must now be zero
	}{
		{"http 500", Options{URL: u + "/raw?status=500", Format: FormatRaw}, "expected 200 OK, got 500 Internal Server Error: \"backend exploded\"", false},
		{"http 404", Options{URL: u + "/nope", Format: FormatRaw, Size: 10}, "got 404 Not Found", false},
		{"size mismatch by Content-Length", Options{URL: u + "/raw", Format: FormatRaw, Size: int64(len(raw)) + 1}, "size mismatch: manifest says 3145729 bytes, server sends Content-Length 3145728", false},
		{"truncated with Content-Length", Options{URL: u + "/gz?cut=400000", Format: FormatGzip}, "truncated: got 400000 of " + strconv.Itoa(len(gz)) + " bytes", true},
		{"truncated chunked raw", Options{URL: u + "/raw?chunked=1&cut=2000000", Format: FormatRaw}, "truncated: got 2000000 of 3145728 bytes", true},
		{"truncated chunked zstd", Options{URL: u + "/zst?chunked=1&cut=500000", Format: FormatZstd}, "truncated: got 500000 of " + strconv.Itoa(len(zst)) + " bytes", true},
		{"longer than size", Options{URL: u + "/raw?chunked=1", Format: FormatRaw, Size: 1 << 20}, "longer than the manifest size: more than 1048576 bytes", true},
		{"sha256 mismatch", Options{URL: u + "/raw", Format: FormatRaw, SHA256: strings.Repeat("ab", 32)}, "sha256 mismatch: manifest says " + strings.Repeat("ab", 32) + ", downloaded " + hexSum(raw) + " (3145728 bytes)", true},
		{"corrupt zstd", Options{URL: u + "/corrupt.zst", Format: FormatZstd, SHA256: hexSum(corrupt)}, "corrupt raw.zst stream", true},
		{"not gzip", Options{URL: u + "/raw", Format: FormatGzip}, "corrupt raw.gz stream", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			body := map[string][]byte{"raw": raw, "gz": gz, "zst": zst, "corrupt.zst": corrupt}[strings.SplitN(strings.TrimPrefix(o.URL, u+"/"), "?", 2)[0]]
			if o.Size == 0 {
				o.Size = int64(len(body))
			}
			if o.SHA256 == "" {
				o.SHA256 = hexSum(body)
			}
			o.Target = emptyTarget(t)
			os.WriteFile(o.Target, bytes.Repeat([]byte{0x55}, 2<<20), 0o644)
			o.BlockSize = 1 << 20
			_, err := Write(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v\nwant containing %q", err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "artifact "+o.URL) {
				t.Errorf("error does not name the artifact: %v", err)
			}
			head := make([]byte, 4096)
			f, _ := os.Open(o.Target)
			f.Read(head)
			f.Close()
			// A failure found mid-stream may stop the writer before its
			// first block lands (the stages run concurrently); either way
			// no image bytes may remain at the start.
			zero := bytes.Equal(head, make([]byte, 4096))
			untouched := bytes.Equal(head, bytes.Repeat([]byte{0x55}, 4096))
			if tc.touched && !zero && !untouched {
				t.Error("failed write left image bytes at the start of the target")
			}
			if !tc.touched && head[0] != 0x55 {
				t.Error("target was modified although the failure was detected before writing")
			}
		})
	}
}

func TestValidateBeforeIO(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	good := Options{URL: srv.URL + "/x", SHA256: strings.Repeat("0", 64), Size: 10, Format: FormatRaw, Target: filepath.Join(t.TempDir(), "missing")}
	tests := []struct {
		mut     func(*Options)
		wantErr string
	}{
		{func(o *Options) { o.SHA256 = "" }, `sha256 "": expected 64 hex digits`},
		{func(o *Options) { o.SHA256 = "xyz" }, `sha256 "xyz": expected 64 hex digits`},
		{func(o *Options) { o.SHA256 = strings.Repeat("0", 62) }, "expected 64 hex digits"},
		{func(o *Options) { o.Size = 0 }, "size 0: expected the artifact's byte count"},
		{func(o *Options) { o.Format = "vmdk" }, `format "vmdk": expected one of raw, raw.gz, raw.zst, raw.xz, qcow2`},
		{func(o *Options) { o.URL = "ftp://x/y" }, "expected an absolute http(s) URL"},
		{func(o *Options) { o.Target = "" }, "target is empty"},
		{func(o *Options) { o.BlockSize = 1000 }, "block size 1000"},
		{func(o *Options) {}, "target: stat"}, // target must already exist
		{func(o *Options) { o.Target = t.TempDir() }, "expected a block device or regular file"},
	}
	for _, tc := range tests {
		o := good
		tc.mut(&o)
		_, err := Write(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("err = %v, want containing %q", err, tc.wantErr)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("server was contacted %d times for invalid options", hits.Load())
	}
}

func TestStallTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	_, err := Write(context.Background(), Options{URL: srv.URL, SHA256: strings.Repeat("0", 64), Size: 100000,
		Format: FormatRaw, Target: emptyTarget(t), StallTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no data received for 300ms") || !strings.Contains(err.Error(), "after 1000 of 100000 bytes") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("stall detection took %s", time.Since(start))
	}
}

// fakeBlock records the device-only calls a block device target gets.
type fakeBlock struct {
	*fileTarget
	synced, reread int
	order          []string
}

func (f *fakeBlock) Sync() error {
	f.synced++
	f.order = append(f.order, "sync")
	return f.fileTarget.Sync()
}
func (f *fakeBlock) RereadPartitions() error {
	f.reread++
	f.order = append(f.order, "rrpart")
	return nil
}

func TestBlockTargetSyncThenRereads(t *testing.T) {
	raw := payload(64 << 10)
	srv := server(t, map[string][]byte{"img": raw})
	ft, err := openTarget(emptyTarget(t), false)
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	fb := &fakeBlock{fileTarget: ft}
	o := Options{URL: srv.URL + "/img", SHA256: hexSum(raw), Size: int64(len(raw)), Format: FormatRaw, Target: ft.path}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := write(context.Background(), o, fb); err != nil {
		t.Fatal(err)
	}
	if strings.Join(fb.order, ",") != "sync,rrpart" {
		t.Errorf("device calls = %v, want sync then BLKRRPART", fb.order)
	}
	// A failed write must not ask the kernel to adopt a half-written table.
	fb.order = nil
	o.SHA256 = strings.Repeat("1", 64)
	if _, err := write(context.Background(), o, fb); err == nil {
		t.Fatal("expected sha256 mismatch")
	}
	if fb.reread != 1 {
		t.Errorf("BLKRRPART issued after a failed write")
	}
}

func TestVerify(t *testing.T) {
	raw := payload(3<<20 + 7)
	p := filepath.Join(t.TempDir(), "disk")
	os.WriteFile(p, append(append([]byte(nil), raw...), 0xEE, 0xEE), 0o644)
	d := digestOf(raw)
	if err := Verify(context.Background(), p, d); err != nil {
		t.Fatalf("verify intact: %v", err)
	}
	flipped := append([]byte(nil), raw...)
	flipped[1<<20+777] ^= 0x01  // grain 1
	flipped[len(raw)-1] ^= 0x80 // the short last grain
	os.WriteFile(p, flipped, 0o644)
	err := Verify(context.Background(), p, d)
	if err == nil || !strings.Contains(err.Error(), "differs from what was written in 2 of 4 grains of 1024 KiB; first at offset 1048576") {
		t.Errorf("flipped bytes: %v", err)
	}
	os.WriteFile(p, raw[:len(raw)-10], 0o644)
	err = Verify(context.Background(), p, d)
	if err == nil || !strings.Contains(err.Error(), "short read: got 3145725 of 3145735 bytes") {
		t.Errorf("short: %v", err)
	}
	bad := d
	bad.CRCs = bad.CRCs[1:]
	if err := Verify(context.Background(), p, bad); err == nil || !strings.Contains(err.Error(), "digest has 3 CRCs for 3145735 bytes") {
		t.Errorf("inconsistent digest accepted: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	os.WriteFile(p, raw, 0o644)
	if err := Verify(ctx, p, d); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("cancelled: %v", err)
	}
}

// digestOf is the read-back digest computed independently of the writer:
// CRC-32C per MiB, the last grain short.
func digestOf(raw []byte) Digest {
	d := Digest{Grain: 1 << 20, Length: int64(len(raw))}
	for off := 0; off < len(raw); off += 1 << 20 {
		d.CRCs = append(d.CRCs, crc32.Checksum(raw[off:min(off+1<<20, len(raw))], crc32.MakeTable(crc32.Castagnoli)))
	}
	return d
}

// BenchmarkWrite compares raw against zstd end to end (HTTP on loopback,
// decompression, hashing, writes to a temp file).
func BenchmarkWrite(b *testing.B) {
	raw := payload(64 << 20)
	for _, format := range []string{FormatRaw, FormatZstd, FormatGzip} {
		art := compress(b, format, raw)
		srv := server(b, map[string][]byte{"img": art})
		target := emptyTarget(b)
		b.Run(format, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := Write(context.Background(), Options{URL: srv.URL + "/img", SHA256: hexSum(art), Size: int64(len(art)), Format: format, Target: target}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(art))/float64(len(raw)), "ratio")
		})
	}
}

// attribute charges the writer's critical path and always adds up.
func TestAttribute(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		wall, wBusy, dBusy, dWait time.Duration
		want                      Stages
	}{
		{1000 * ms, 600 * ms, 100 * ms, 300 * ms, Stages{Download: 300 * ms, Decode: 100 * ms, Write: 600 * ms}},
		{1000 * ms, 0, 0, 0, Stages{Download: 1000 * ms}},                // no decoder work seen: upstream is the network
		{1000 * ms, 2000 * ms, 5 * ms, 5 * ms, Stages{Write: 1000 * ms}}, // clock skew: clamped to the wall
		{1000 * ms, 0, 800 * ms, -5 * ms, Stages{Decode: 1000 * ms}},     // a negative wait counts as none
		{1000 * ms, -5 * ms, 300 * ms, 100 * ms, Stages{Download: 250 * ms, Decode: 750 * ms}},
	} {
		got := attribute(c.wall, c.wBusy, c.dBusy, c.dWait)
		if got != c.want {
			t.Errorf("attribute(%v, %v, %v, %v) = %+v, want %+v", c.wall, c.wBusy, c.dBusy, c.dWait, got, c.want)
		}
		if sum := got.Download + got.Decode + got.Write; sum != c.wall {
			t.Errorf("stages add up to %v, want %v", sum, c.wall)
		}
	}
}

// A server that trickles the image makes the download the stage that held
// the write up, and the stages account for the whole streamed pass.
func TestStagesChargeTheSlowDownload(t *testing.T) {
	raw := payload(2 << 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
		for off := 0; off < len(raw); off += 256 << 10 {
			w.Write(raw[off:min(off+256<<10, len(raw))])
			w.(http.Flusher).Flush()
			time.Sleep(40 * time.Millisecond)
		}
	}))
	defer srv.Close()
	res, err := Write(context.Background(), Options{URL: srv.URL, SHA256: hexSum(raw), Size: int64(len(raw)),
		Format: FormatRaw, Target: emptyTarget(t), BlockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stages
	sum := s.Download + s.Decode + s.Write
	if sum <= 0 || sum > res.Duration {
		t.Fatalf("stages %+v add up to %v, outside (0, %v]", s, sum, res.Duration)
	}
	if s.Download < s.Decode+s.Write {
		t.Errorf("stages %+v: the trickled download is not what held the write up", s)
	}
}
