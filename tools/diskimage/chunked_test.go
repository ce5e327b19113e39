package diskimage

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/chunklist"
)

// withList serves art as "img" and its chunk list as "img.chunks" and
// returns Options for it.
func withList(t *testing.T, srv *rangeServer, art []byte, alg chunklist.Alg, chunk int64, format string) Options {
	t.Helper()
	l, err := chunklist.Build(bytes.NewReader(art), alg, chunk)
	if err != nil {
		t.Fatal(err)
	}
	lb := l.Marshal()
	srv.mu.Lock()
	srv.files["img"], srv.files["img.chunks"] = art, lb
	srv.mu.Unlock()
	return Options{URL: srv.URL + "/img", SHA256: hexSum(art), Size: int64(len(art)), Format: format,
		ChunksURL: srv.URL + "/img.chunks", ChunksSHA256: chunklist.SumHex(lb), RetryWait: time.Millisecond}
}

func TestChunkedInstall(t *testing.T) {
	raw := diskLike(5<<20 + 4608)
	for _, format := range []string{FormatRaw, FormatZstd} {
		for _, alg := range []chunklist.Alg{chunklist.SHA256, chunklist.BLAKE3} {
			for _, conns := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/conns=%d", format, alg, conns), func(t *testing.T) {
					art := compress(t, format, raw)
					srv := newRangeServer(t, map[string][]byte{})
					o := withList(t, srv, art, alg, 64<<10, format)
					o.Target, o.Connections = emptyTarget(t), conns
					res, err := Write(context.Background(), o)
					if err != nil {
						t.Fatal(err)
					}
					got, _ := os.ReadFile(o.Target)
					if !bytes.Equal(got, raw) {
						t.Fatal("chunk-verified install is not byte-exact")
					}
					if want := "chunked-" + alg.String() + "-64KiB"; res.Verification != want || res.Connections != conns {
						t.Errorf("verification %q over %d connections, want %q over %d", res.Verification, res.Connections, want, conns)
					}
					if res.SHA256 != o.SHA256 || res.DownloadedBytes != int64(len(art)) {
						t.Errorf("sha256 %s, downloaded %d; want %s, %d", res.SHA256, res.DownloadedBytes, o.SHA256, len(art))
					}
				})
			}
		}
	}
}

// recordingTarget remembers every range the writer touched.
type recordingTarget struct {
	*fileTarget
	mu      sync.Mutex
	touched [][2]int64
}

func (r *recordingTarget) WriteAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.touched = append(r.touched, [2]int64{off, off + int64(len(p))})
	r.mu.Unlock()
	return r.fileTarget.WriteAt(p, off)
}

func (r *recordingTarget) ZeroRange(off, n int64) error {
	r.mu.Lock()
	r.touched = append(r.touched, [2]int64{off, off + n})
	r.mu.Unlock()
	return r.fileTarget.ZeroRange(off, n)
}

// A corrupted chunk is refused before any of it reaches the disk: with a
// raw image, image offsets are artifact offsets, so no write may reach
// the bad chunk's range (the only write past the good prefix would be the
// failure's zeroing of the first MiB, which lies before it).
func TestChunkedRefusesCorruptChunkBeforeWrite(t *testing.T) {
	raw := payload(6 << 20)
	const chunk = 64 << 10
	const bad = 3<<20 + 5*chunk // an offset inside chunk 53
	for _, conns := range []int{1, 4} {
		t.Run("conns="+strconv.Itoa(conns), func(t *testing.T) {
			srv := newRangeServer(t, map[string][]byte{})
			o := withList(t, srv, raw, chunklist.BLAKE3, chunk, FormatRaw)
			o.Connections = conns
			corrupt := append([]byte(nil), raw...)
			corrupt[bad+17] ^= 0x40
			srv.mu.Lock()
			srv.files["img"] = corrupt // same size, one bit off
			srv.mu.Unlock()
			path := emptyTarget(t)
			ft, err := openTarget(path, false)
			if err != nil {
				t.Fatal(err)
			}
			defer ft.Close()
			rt := &recordingTarget{fileTarget: ft}
			o.Target = path
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			_, err = write(context.Background(), o, rt)
			if err == nil || !strings.Contains(err.Error(), "chunk 53 (bytes 3473408-3538943): blake3 mismatch") ||
				!strings.Contains(err.Error(), "refused before any of it was decoded or written") {
				t.Fatalf("err = %v", err)
			}
			badFrom := int64(bad / chunk * chunk)
			for _, r := range rt.touched {
				if r[1] > badFrom {
					t.Errorf("wrote [%d, %d): past the start of the corrupt chunk at %d", r[0], r[1], badFrom)
				}
			}
			got, _ := os.ReadFile(path)
			if len(got) > bad+17 && got[bad+17] == corrupt[bad+17] {
				t.Error("the corrupt byte reached the target")
			}
		})
	}
}

// The list is bound to the artifact: a list made for another file is
// refused even when the manifest's pin matches the list itself, and a
// list that does not match its pin is refused; both before the target is
// touched.
func TestChunkListBoundToArtifact(t *testing.T) {
	raw := payload(1 << 20)
	other := payload(1 << 20)
	other[0] ^= 1
	srv := newRangeServer(t, map[string][]byte{})
	o := withList(t, srv, raw, chunklist.SHA256, 64<<10, FormatRaw)
	ol, _ := chunklist.Build(bytes.NewReader(other), chunklist.SHA256, 64<<10)
	otherList := ol.Marshal()
	for _, c := range []struct {
		name, want string
		list       []byte
		pin        string
	}{
		{"another artifact's list", "belongs to another artifact", otherList, chunklist.SumHex(otherList)},
		{"list not matching its pin", "chunk list " + srv.URL + "/img.chunks: sha256 mismatch", otherList, o.ChunksSHA256},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv.mu.Lock()
			srv.files["img.chunks"] = c.list
			srv.mu.Unlock()
			o := o
			o.ChunksSHA256, o.Target = c.pin, emptyTarget(t)
			os.WriteFile(o.Target, bytes.Repeat([]byte{0x55}, 8192), 0o644)
			_, err := Write(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if got, _ := os.ReadFile(o.Target); !bytes.Equal(got, bytes.Repeat([]byte{0x55}, 8192)) {
				t.Error("the target was touched")
			}
		})
	}
}

// cuttingServer serves like rangeServer but cuts the first response to a
// Range request starting at cutFrom after half its bytes.
func cuttingServer(t *testing.T, files map[string][]byte, cutFrom int64) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var ranges []string
	cut := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := files[strings.TrimPrefix(r.URL.Path, "/")]
		rg := r.Header.Get("Range")
		mu.Lock()
		ranges = append(ranges, rg+" if-range="+r.Header.Get("If-Range"))
		doCut := !cut && strings.HasPrefix(rg, "bytes="+strconv.FormatInt(cutFrom, 10)+"-")
		if doCut {
			cut = true
		}
		mu.Unlock()
		w.Header().Set("ETag", `"`+hexSum(b)[:16]+`"`)
		if doCut {
			var from, to int64
			fmt.Sscanf(rg, "bytes=%d-%d", &from, &to)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(b)))
			w.Header().Set("Content-Length", strconv.FormatInt(to-from+1, 10))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[from : from+(to-from+1)/2])
			w.(http.Flusher).Flush()
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)
	return srv, &ranges
}

// A striped download resumes a dropped range from its last byte, with
// If-Range, and the result is byte-exact and fully verified.
func TestStripedDownloadResumes(t *testing.T) {
	raw := payload(13<<20 + 12345)
	l, _ := chunklist.Build(bytes.NewReader(raw), chunklist.SHA256, 1<<20)
	lb := l.Marshal()
	srv, ranges := cuttingServer(t, map[string][]byte{"img": raw, "img.chunks": lb}, stripeSize)
	o := Options{URL: srv.URL + "/img", SHA256: hexSum(raw), Size: int64(len(raw)), Format: FormatRaw,
		ChunksURL: srv.URL + "/img.chunks", ChunksSHA256: chunklist.SumHex(lb), Connections: 3,
		Target: emptyTarget(t), RetryWait: time.Millisecond}
	res, err := Write(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(o.Target); !bytes.Equal(got, raw) {
		t.Fatal("resumed striped install is not byte-exact")
	}
	if res.Resumes != 1 {
		t.Errorf("resumes = %d, want 1 (requests %q)", res.Resumes, *ranges)
	}
	etag := `"` + hexSum(raw)[:16] + `"`
	want := fmt.Sprintf("bytes=%d-%d if-range=%s", stripeSize+stripeSize/2, 2*stripeSize-1, etag)
	found := false
	for _, r := range *ranges {
		found = found || r == want
	}
	if !found {
		t.Errorf("no resume request %q among %q", want, *ranges)
	}
}

// Several connections without a list are refused: a range could not be
// verified before it is written.
func TestConnectionsNeedChunkList(t *testing.T) {
	o := Options{URL: "http://x/img", SHA256: strings.Repeat("a", 64), Size: 1, Format: FormatRaw, Target: "/dev/null", Connections: 2}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "several connections need a chunk list") {
		t.Fatalf("err = %v", err)
	}
}
