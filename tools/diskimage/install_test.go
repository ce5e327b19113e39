package diskimage

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// diskLike is an image with what real disk images have: whole MiB of
// zeros (the writer's zero grain) between data, and a ragged end (a
// multiple of 512, as qemu-img needs, but not of 4096).
func diskLike(size int) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, size)
	for off := 0; off < size; off += 1 << 20 {
		if (off>>20)%3 == 1 {
			continue // a zero MiB
		}
		end := min(off+(1<<20), size)
		for i := off; i < end; i += 7 {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

// rangeServer serves files with http.ServeContent (Range, If-Range,
// Accept-Ranges, a strong ETag), like the coordinator's artifact server.
// cutOnce[name] = N cuts the first full GET after N body bytes.
type rangeServer struct {
	*httptest.Server
	mu      sync.Mutex
	files   map[string][]byte
	cutOnce map[string]int
	// replaceAfterCut, when set, replaces the cut file's content: the
	// artifact changed while the client was away.
	replaceAfterCut []byte
	ranges          []string // Range header of every request, "" when absent
	ifRange         []string
}

func newRangeServer(t testing.TB, files map[string][]byte) *rangeServer {
	s := &rangeServer{files: files, cutOnce: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *rangeServer) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	s.mu.Lock()
	b, ok := s.files[name]
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	s.ifRange = append(s.ifRange, r.Header.Get("If-Range"))
	cut, doCut := s.cutOnce[name]
	if doCut && r.Header.Get("Range") == "" {
		delete(s.cutOnce, name)
	} else {
		doCut = false
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	etag := `"` + hexSum(b)[:16] + `"`
	w.Header().Set("ETag", etag)
	if doCut {
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:cut])
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		s.mu.Lock()
		if s.replaceAfterCut != nil {
			s.files[name] = s.replaceAfterCut
		}
		s.mu.Unlock()
		return
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
	}
}

// qcow2Of converts raw to qcow2 with qemu-img and extra -o options.
func qcow2Of(t testing.TB, raw []byte, opts string) []byte {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed (qemu-utils)")
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "out.qcow2")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"convert", "-q", "-f", "raw", "-O", "qcow2"}
	if opts == "compressed" {
		args = append(args, "-c")
	} else if opts != "" {
		args = append(args, "-o", opts)
	}
	qemuImg(t, append(args, in, out)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type variant struct {
	name    string
	zeroed  bool
	decoder string
}

// variants runs every format on a used and a zeroed target, through every
// decoder that can decode it (the external one when installed).
func variants(t *testing.T, format string) []variant {
	var vs []variant
	decoders := []string{DecoderGo}
	if format == FormatZstd {
		decoders = []string{DecoderCureZstd, DecoderKlauspostZstd}
	}
	if args, ok := externalDecoders[format]; ok {
		if _, err := exec.LookPath(args[0]); err != nil {
			t.Logf("%s not installed: only the Go decoders are tested for %s", args[0], format)
		} else {
			decoders = append(decoders, DecoderExec)
		}
	}
	for _, d := range decoders {
		for _, z := range []bool{false, true} {
			name := "zeroed=" + strconv.FormatBool(z)
			if d != DecoderGo {
				name += "/" + d
			}
			vs = append(vs, variant{name, z, d})
		}
	}
	return vs
}

func TestInstallFormats(t *testing.T) {
	raw := diskLike(6<<20 + 4608)
	files := map[string][]byte{}
	for _, f := range []string{FormatRaw, FormatGzip, FormatZstd, FormatXz} {
		files["img."+f] = compress(t, f, raw)
	}
	files["img.qcow2"] = qcow2Of(t, raw, "")
	files["img.v2.qcow2"] = qcow2Of(t, raw, "compat=0.10")
	files["img.64k.qcow2"] = qcow2Of(t, raw, "cluster_size=4096") // many L2 entries, small clusters
	srv := newRangeServer(t, files)
	cases := []struct{ file, format string }{
		{"img.raw", FormatRaw}, {"img.raw.gz", FormatGzip}, {"img.raw.zst", FormatZstd}, {"img.raw.xz", FormatXz},
		{"img.qcow2", FormatQcow2}, {"img.v2.qcow2", FormatQcow2}, {"img.64k.qcow2", FormatQcow2},
	}
	for _, c := range cases {
		for _, v := range variants(t, c.format) {
			zeroed := v.zeroed
			t.Run(c.file+"/"+v.name, func(t *testing.T) {
				art := files[c.file]
				target := emptyTarget(t)
				// A used disk: garbage everywhere, including where the
				// image has zeros; a zeroed disk reads as zeros.
				fill := bytes.Repeat([]byte{0xAA}, len(raw)+(1<<20))
				if zeroed {
					fill = make([]byte, len(raw)+(1<<20))
				}
				os.WriteFile(target, fill, 0o644)
				res, err := Write(context.Background(), Options{URL: srv.URL + "/" + c.file, SHA256: hexSum(art), Size: int64(len(art)),
					Format: c.format, Target: target, BlockSize: 2 << 20, TargetZeroed: zeroed, Decoder: v.decoder})
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(target)
				if !bytes.Equal(got[:len(raw)], raw) {
					t.Fatalf("target differs from the image")
				}
				if !bytes.Equal(got[len(raw):], fill[len(raw):]) {
					t.Error("bytes after the image were changed")
				}
				if res.WrittenBytes != int64(len(raw)) || !reflect.DeepEqual(res.Readback, digestOf(raw)) || res.SHA256 != hexSum(art) || res.DownloadedBytes != int64(len(art)) {
					t.Errorf("result %+v", res)
				}
				want := map[string]string{FormatGzip: "go gzip", FormatXz: "go xz", FormatQcow2: "go qcow2", FormatRaw: "none",
					DecoderCureZstd: "cure zstd", DecoderKlauspostZstd: "klauspost zstd"}[c.format]
				if c.format == FormatZstd {
					want = map[string]string{DecoderCureZstd: "cure zstd", DecoderKlauspostZstd: "klauspost zstd"}[v.decoder]
				}
				if v.decoder == DecoderExec {
					if args := externalDecoders[c.format]; !strings.HasSuffix(res.Decoder, "/"+args[0]) {
						t.Errorf("decoder %q, want the external %s", res.Decoder, args[0])
					}
				} else if res.Decoder != want {
					t.Errorf("decoder %q, want %q", res.Decoder, want)
				}
				if res.ZeroBytes != 2<<20 { // MiB 1 and 4 are zero
					t.Errorf("zero bytes = %d, want %d", res.ZeroBytes, 2<<20)
				}
				if err := Verify(context.Background(), target, res.Readback); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestInstallZeroRegionsNotWritten checks that zero regions of a fresh
// file become holes rather than written blocks.
func TestInstallZeroRegionsNotWritten(t *testing.T) {
	raw := make([]byte, 64<<20)
	copy(raw[10<<20:], bytes.Repeat([]byte{1}, 4096))
	art := compress(t, FormatZstd, raw)
	srv := newRangeServer(t, map[string][]byte{"z": art})
	for _, zeroed := range []bool{false, true} {
		target := emptyTarget(t)
		res, err := Write(context.Background(), Options{URL: srv.URL + "/z", SHA256: hexSum(art), Size: int64(len(art)),
			Format: FormatZstd, Target: target, TargetZeroed: zeroed})
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(target)
		if fi.Size() != int64(len(raw)) {
			t.Errorf("zeroed=%v: file size %d, want %d", zeroed, fi.Size(), len(raw))
		}
		if used := allocated(t, target); used > 4<<20 {
			t.Errorf("zeroed=%v: %d bytes allocated for a 64 MiB image with one 1 MiB data grain", zeroed, used)
		}
		if res.ZeroBytes != 63<<20 {
			t.Errorf("zeroed=%v: zero bytes %d", zeroed, res.ZeroBytes)
		}
		if err := Verify(context.Background(), target, digestOf(raw)); err != nil {
			t.Error(err)
		}
	}
}

// allocated is the space a file really occupies on disk.
func allocated(t testing.TB, p string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestInstallBadImages(t *testing.T) {
	raw := diskLike(3<<20 + 512)
	zst := compress(t, FormatZstd, raw)
	corrupt := append([]byte(nil), zst...)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0xff
	}
	qc := qcow2Of(t, raw, "")
	qcFlipped := append([]byte(nil), qc...)
	qcFlipped[len(qcFlipped)-100] ^= 1 // in the data: only the sha256 can tell
	encrypted := append([]byte(nil), qc...)
	binary.BigEndian.PutUint32(encrypted[32:], 1)
	compressed := qcow2Of(t, raw, "compressed")
	extL2 := qcow2Of(t, raw, "extended_l2=on")
	files := map[string][]byte{
		"zst": zst, "corrupt.zst": corrupt, "truncated.zst": zst[:len(zst)/2], "cut.zst": zst[:len(zst)/2], "qc": qc, "qc-flipped": qcFlipped,
		"qc-encrypted": encrypted, "qc-compressed": compressed, "qc-extl2": extL2, "qc-truncated": qc[:len(qc)-70000],
		"qc-backing": backingOverlay(t), "qc-unordered": unorderedQcow2(t),
	}
	srv := newRangeServer(t, files)
	// truncated.zst is served short but claimed at full size; the server
	// also cuts every full GET, so resumes run out.
	tests := []struct {
		name, file, format string
		size               int64  // 0: the file's
		sha                string // "": the file's
		wantErr            string
		touched            bool
		decoder            string
	}{
		{"truncated", "truncated.zst", FormatZstd, int64(len(zst)), hexSum(zst), "size mismatch: manifest says " + strconv.Itoa(len(zst)) + " bytes, server sends Content-Length " + strconv.Itoa(len(zst)/2), false, ""},
		{"corrupted zstd", "corrupt.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, ""},
		{"corrupted zstd, manifest hash", "corrupt.zst", FormatZstd, 0, hexSum(zst), "corrupt raw.zst stream", true, ""},
		{"corrupted zstd, cure decoder", "corrupt.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderCureZstd},
		{"cut zstd stream, cure decoder", "cut.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderCureZstd},
		{"corrupted zstd, klauspost decoder", "corrupt.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderKlauspostZstd},
		{"cut zstd stream, klauspost decoder", "cut.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderKlauspostZstd},
		{"corrupted zstd, zstd(1)", "corrupt.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderExec},
		{"cut zstd stream, zstd(1)", "cut.zst", FormatZstd, 0, "", "corrupt raw.zst stream", true, DecoderExec},
		{"wrong size", "zst", FormatZstd, int64(len(zst)) - 1, "", "size mismatch: manifest says " + strconv.Itoa(len(zst)-1), false, ""},
		{"wrong hash", "zst", FormatZstd, 0, strings.Repeat("ab", 32), "sha256 mismatch: manifest says " + strings.Repeat("ab", 32) + ", downloaded " + hexSum(zst), true, ""},
		{"qcow2 flipped data bit", "qc-flipped", FormatQcow2, 0, hexSum(qc), "sha256 mismatch", true, ""},
		{"qcow2 truncated", "qc-truncated", FormatQcow2, int64(len(qc)), hexSum(qc), "size mismatch", false, ""},
		{"qcow2 encrypted", "qc-encrypted", FormatQcow2, 0, "", "qcow2: image is encrypted (crypt_method 1): not supported", false, ""},
		{"qcow2 compressed clusters", "qc-compressed", FormatQcow2, 0, "", "compressed cluster: not supported", false, ""},
		{"qcow2 extended L2", "qc-extl2", FormatQcow2, 0, "", "extended L2 entries", false, ""},
		{"qcow2 backing file", "qc-backing", FormatQcow2, 0, "", "image has a backing file", false, ""},
		{"qcow2 out of guest order", "qc-unordered", FormatQcow2, 0, "", "clusters are not in guest order", false, ""},
		{"raw called qcow2", "zst", FormatQcow2, 0, "", "qcow2: header: expected magic", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			art := files[tc.file]
			if tc.decoder == DecoderExec {
				if _, err := exec.LookPath("zstd"); err != nil {
					t.Skip("zstd(1) not installed")
				}
			}
			o := Options{URL: srv.URL + "/" + tc.file, Format: tc.format, Size: tc.size, SHA256: tc.sha, BlockSize: 1 << 20, RetryWait: time.Millisecond, Decoder: tc.decoder}
			if o.Size == 0 {
				o.Size = int64(len(art))
			}
			if o.SHA256 == "" {
				o.SHA256 = hexSum(art)
			}
			o.Target = emptyTarget(t)
			os.WriteFile(o.Target, bytes.Repeat([]byte{0x55}, 4<<20), 0o644)
			_, err := Write(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v\nwant containing %q", err, tc.wantErr)
			}
			t.Logf("error: %v", err)
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

// backingOverlay is a qcow2 whose unallocated clusters come from a base.
func backingOverlay(t testing.TB) []byte {
	dir := t.TempDir()
	base, ov := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "ov.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", base, "4M")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", ov)
	b, _ := os.ReadFile(ov)
	return b
}

// unorderedQcow2 has guest cluster 32 stored before guest cluster 0.
func unorderedQcow2(t testing.TB) []byte {
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io not installed")
	}
	p := filepath.Join(t.TempDir(), "u.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", p, "4M")
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 1 2M 64k", "-c", "write -P 2 0 64k", p).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(p)
	return b
}

func TestInstallResumesDownload(t *testing.T) {
	raw := diskLike(8<<20 + 1024)
	for _, c := range []struct{ file, format string }{{"img.raw.zst", FormatZstd}, {"img.qcow2", FormatQcow2}} {
		t.Run(c.format, func(t *testing.T) {
			art := compress(t, FormatZstd, raw)
			if c.format == FormatQcow2 {
				art = qcow2Of(t, raw, "")
			}
			srv := newRangeServer(t, map[string][]byte{c.file: art})
			cut := len(art) / 3
			srv.cutOnce[c.file] = cut
			target := emptyTarget(t)
			res, err := Write(context.Background(), Options{URL: srv.URL + "/" + c.file, SHA256: hexSum(art), Size: int64(len(art)),
				Format: c.format, Target: target, RetryWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(target)
			if !bytes.Equal(got, raw) || !reflect.DeepEqual(res.Readback, digestOf(raw)) {
				t.Fatal("resumed install is not byte-exact")
			}
			if res.Resumes != 1 || res.DownloadedBytes != int64(len(art)) {
				t.Errorf("resumes %d, downloaded %d of %d", res.Resumes, res.DownloadedBytes, len(art))
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			want := "bytes=" + strconv.Itoa(cut) + "-"
			last := len(srv.ranges) - 1
			if srv.ranges[last] != want || srv.ifRange[last] != `"`+hexSum(art)[:16]+`"` {
				t.Errorf("resume request: Range %q If-Range %q; want Range %q with the ETag (all: %q)", srv.ranges[last], srv.ifRange[last], want, srv.ranges)
			}
		})
	}
}

func TestResumeRefusedWhenArtifactChanged(t *testing.T) {
	raw := diskLike(4 << 20)
	art := compress(t, FormatZstd, raw)
	srv := newRangeServer(t, map[string][]byte{"a": art})
	srv.cutOnce["a"] = len(art) / 2
	// After the cut, the server has a different artifact under the name:
	// If-Range fails and it answers 200 with the whole new file.
	changed := append([]byte(nil), art...)
	changed[len(changed)-1] ^= 1
	srv.replaceAfterCut = changed
	o := Options{URL: srv.URL + "/a", SHA256: hexSum(art), Size: int64(len(art)), Format: FormatZstd, Target: emptyTarget(t), RetryWait: time.Millisecond}
	_, err := Write(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "expected 206 Partial Content, got 200 OK (artifact changed") {
		t.Fatalf("err = %v", err)
	}
}

func TestResumeGivesUp(t *testing.T) {
	raw := diskLike(2 << 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer dies after 1000 bytes; ranges are honoured.
		w.Header().Set("Accept-Ranges", "bytes")
		from := 0
		if rg := r.Header.Get("Range"); rg != "" {
			from, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
			w.Header().Set("Content-Range", "bytes "+strconv.Itoa(from)+"-"+strconv.Itoa(len(raw)-1)+"/"+strconv.Itoa(len(raw)))
			w.Header().Set("Content-Length", strconv.Itoa(len(raw)-from))
			w.WriteHeader(http.StatusPartialContent)
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
		}
		w.Write(raw[from : from+1000])
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer srv.Close()
	res, err := Write(context.Background(), Options{URL: srv.URL, SHA256: hexSum(raw), Size: int64(len(raw)), Format: FormatRaw,
		Target: emptyTarget(t), Retries: 3, RetryWait: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "truncated: got 4000 of 2097152 bytes") {
		t.Fatalf("err = %v", err)
	}
	if res.Resumes != 3 {
		t.Errorf("resumes = %d, want 3", res.Resumes)
	}
}

type panicReader struct{ n int }

func (p *panicReader) Read(b []byte) (int, error) {
	if p.n++; p.n > 2 {
		panic("index out of range [7] with length 3")
	}
	return len(b), nil
}

// A decoder that panics on a hostile stream fails the install with an
// error; the process (the runner) survives and the target is invalidated.
func TestDecoderPanicFailsInstall(t *testing.T) {
	raw := diskLike(4 << 20)
	art := compress(t, FormatZstd, raw)
	srv := newRangeServer(t, map[string][]byte{"z": art})
	decoderSeam = func(io.Reader) io.Reader { return &panicReader{} }
	defer func() { decoderSeam = func(r io.Reader) io.Reader { return r } }()
	target := emptyTarget(t)
	os.WriteFile(target, bytes.Repeat([]byte{0x55}, 8<<20), 0o644)
	_, err := Write(context.Background(), Options{URL: srv.URL + "/z", SHA256: hexSum(art), Size: int64(len(art)), Format: FormatZstd, Target: target, BlockSize: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "decoder panicked on this stream: index out of range") {
		t.Fatalf("err = %v", err)
	}
	head := make([]byte, 4096)
	f, _ := os.Open(target)
	f.Read(head)
	f.Close()
	if !bytes.Equal(head, make([]byte, 4096)) && !bytes.Equal(head, bytes.Repeat([]byte{0x55}, 4096)) {
		t.Error("image bytes left at the start of the target")
	}
}
