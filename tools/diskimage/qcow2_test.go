package diskimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildQcow2 lays out a minimal version 3 image by hand: header in
// cluster 0, the L1 table from cluster 1, then the L2 tables and the data
// clusters in guest order (the layout qemu-img convert writes). clusters
// maps a guest cluster index to its bytes (at most one cluster). There is
// no refcount table: readQcow2 does not read one.
func buildQcow2(clusterBits uint, virtualSize int64, clusters map[int64][]byte) []byte {
	cs := int64(1) << clusterBits
	perL2 := cs / 8
	need := (virtualSize + cs*perL2 - 1) / (cs * perL2)
	l1Clusters := max((need*8+cs-1)/cs, 1)
	var guests []int64
	l2For := map[int64]bool{}
	for g := range clusters {
		guests = append(guests, g)
		l2For[g/perL2] = true
	}
	slices.Sort(guests)
	next := (1 + l1Clusters) * cs
	l2Off := map[int64]int64{}
	for i := range need {
		if l2For[i] {
			l2Off[i], next = next, next+cs
		}
	}
	dataOff := map[int64]int64{}
	for _, g := range guests {
		dataOff[g], next = next, next+cs
	}
	b := make([]byte, next)
	be := binary.BigEndian
	be.PutUint32(b[0:], qcowMagic)
	be.PutUint32(b[4:], 3)
	be.PutUint32(b[20:], uint32(clusterBits))
	be.PutUint64(b[24:], uint64(virtualSize))
	be.PutUint32(b[36:], uint32(need))
	be.PutUint64(b[40:], uint64(cs))
	be.PutUint32(b[96:], 4) // refcount_order
	be.PutUint32(b[100:], 104)
	for i, off := range l2Off {
		be.PutUint64(b[cs+8*i:], uint64(off)|1<<63) // bit 63: COPIED, as qemu-img writes it
	}
	for _, g := range guests {
		be.PutUint64(b[l2Off[g/perL2]+8*(g%perL2):], uint64(dataOff[g])|1<<63)
		copy(b[dataOff[g]:], clusters[g])
	}
	return b
}

// guestOf is what an image built by buildQcow2 reads as.
func guestOf(clusterBits uint, virtualSize int64, clusters map[int64][]byte) []byte {
	out := make([]byte, virtualSize)
	for g, d := range clusters {
		copy(out[g<<clusterBits:], d)
	}
	return out
}

func smallQcow2() (uint, int64, map[int64][]byte) {
	return 9, 200 << 10, map[int64][]byte{
		0:   bytes.Repeat([]byte{1}, 512),
		3:   bytes.Repeat([]byte{2}, 100),
		64:  bytes.Repeat([]byte{3}, 512), // first cluster of the second L2 table
		399: bytes.Repeat([]byte{4}, 512), // the last cluster
	}
}

// readStream reads the whole guest image of an image parsed from b.
func readStream(img *qcowImage, b []byte) ([]byte, error) {
	return io.ReadAll(img.stream(bytes.NewReader(b)))
}

func TestReadQcow2Synthetic(t *testing.T) {
	cb, vs, cl := smallQcow2()
	b := buildQcow2(cb, vs, cl)
	img, err := readQcow2(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readStream(img, b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, guestOf(cb, vs, cl)) {
		t.Fatal("guest image differs from the clusters written")
	}
}

// fixtureGuest is the raw image the testdata/qcow2 files were converted
// from: 8.5 KiB, guest KiB 0, 5 and 8 (half of it) filled with a pattern.
func fixtureGuest() []byte {
	b := make([]byte, 8*1024+512)
	for _, c := range []int{0, 5, 8} {
		for j := 0; j < 1024 && c*1024+j < len(b); j++ {
			b[c*1024+j] = byte((c*31+j)%251) + 1
		}
	}
	return b
}

func readFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("testdata/qcow2/*.qcow2")
	if err != nil || len(paths) == 0 {
		t.Fatalf("qcow2 fixtures: %v (found %d)", err, len(paths))
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

// The fixtures were made by qemu-img 7.2 with 512-byte clusters: convert
// -O qcow2 (v3), the same with compat=0.10 (v2) and -c, and create 1M.
func TestReadQcow2Fixtures(t *testing.T) {
	want := map[string]string{
		"v3-512.qcow2":         "",
		"v2-512.qcow2":         "",
		"empty-512.qcow2":      "",
		"compressed-512.qcow2": "compressed cluster: not supported",
	}
	for name, b := range readFixtures(t) {
		t.Run(name, func(t *testing.T) {
			wantErr, ok := want[name]
			if !ok {
				t.Fatalf("fixture %s has no expectation here", name)
			}
			img, err := readQcow2(bytes.NewReader(b), int64(len(b)))
			if wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Fatalf("err = %v, want containing %q", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := readStream(img, b)
			if err != nil {
				t.Fatal(err)
			}
			exp := fixtureGuest()
			if name == "empty-512.qcow2" {
				exp = make([]byte, 1<<20)
			}
			if !bytes.Equal(got, exp) {
				t.Fatalf("guest image of %s differs from the raw image it was made from", name)
			}
		})
	}
}

// Every header field that sizes, places or counts something is checked
// before it is used: these images used to panic (virtual_size >= 2^63),
// ask for multi-GiB buffers, or read far past the file.
func TestReadQcow2RejectsHostileHeaders(t *testing.T) {
	cb, vs, cl := smallQcow2()
	good := buildQcow2(cb, vs, cl)
	be := binary.BigEndian
	l2 := int64(2 * 512) // the first L2 table: cluster 2 (after the L1 in cluster 1)
	tests := []struct {
		name    string
		mut     func(b []byte) []byte
		wantErr string
	}{
		{"virtual_size 2^63", func(b []byte) []byte { be.PutUint64(b[24:], 1<<63); return b },
			"qcow2: header: virtual_size 9223372036854775808: larger than the largest disk offset"},
		{"virtual_size 2^64-1", func(b []byte) []byte { be.PutUint64(b[24:], math.MaxUint64); return b },
			"virtual_size 18446744073709551615: larger than"},
		{"virtual_size 2^63-1 needs a huge L1", func(b []byte) []byte { be.PutUint64(b[24:], math.MaxInt64); return b },
			"virtual_size 9223372036854775807 with 512-byte clusters needs 281474976710656 L1 entries: more than the 33554432-byte L1 table limit"},
		{"virtual_size 2^63-1, 2 MiB clusters", func(b []byte) []byte {
			be.PutUint32(b[20:], 21)
			be.PutUint64(b[24:], math.MaxInt64)
			return b
		}, "needs 16777216 L1 entries: more than the 33554432-byte L1 table limit"},
		{"l1_size 2^32-1", func(b []byte) []byte { be.PutUint32(b[36:], math.MaxUint32); return b },
			"qcow2: header: l1_size 4294967295: more than the 4194304 entries"},
		{"l1_size too small", func(b []byte) []byte { be.PutUint32(b[36:], 1); return b },
			"l1_size 1: a 204800-byte image needs at least 7 entries"},
		{"l1_table_offset 2^63", func(b []byte) []byte { be.PutUint64(b[40:], 1<<63); return b },
			"qcow2: header: l1_table_offset 9223372036854775808: expected a cluster-aligned offset with the 56-byte L1 table inside"},
		{"l1_table_offset 2^64-512", func(b []byte) []byte { be.PutUint64(b[40:], math.MaxUint64-511); return b },
			"l1_table_offset 18446744073709551104"},
		{"l1_table_offset at the end", func(b []byte) []byte { be.PutUint64(b[40:], uint64(len(b))); return b },
			"l1_table_offset"},
		{"l1_table_offset unaligned", func(b []byte) []byte { be.PutUint64(b[40:], 513); return b },
			"l1_table_offset 513"},
		{"cluster_bits 8", func(b []byte) []byte { be.PutUint32(b[20:], 8); return b }, "cluster_bits 8: expected 9-21"},
		{"cluster_bits 22", func(b []byte) []byte { be.PutUint32(b[20:], 22); return b }, "cluster_bits 22: expected 9-21"},
		{"cluster_bits 2^32-1", func(b []byte) []byte { be.PutUint32(b[20:], math.MaxUint32); return b }, "cluster_bits 4294967295"},
		{"header_length 2^32-1", func(b []byte) []byte { be.PutUint32(b[100:], math.MaxUint32); return b },
			"header_length 4294967295: expected 104-4096"},
		{"header_length 50", func(b []byte) []byte { be.PutUint32(b[100:], 50); return b }, "header_length 50"},
		{"file of 10 bytes", func(b []byte) []byte { return b[:10] }, "qcow2: file size 10: shorter than the 72-byte qcow2 header"},
		{"empty file", func(b []byte) []byte { return nil }, "qcow2: file size 0"},
		{"version 3 header cut", func(b []byte) []byte { return b[:90] }, "version 3 header shorter than 104 bytes (file is 90 bytes)"},
		{"L2 table beyond the file", func(b []byte) []byte { be.PutUint64(b[512:], uint64(len(b))); return b },
			"L1[0]: L2 table offset"},
		{"L2 table at 2^55", func(b []byte) []byte { be.PutUint64(b[512:], 1<<55); return b }, "L2 table offset 36028797018963968"},
		{"L2 table shared", func(b []byte) []byte { copy(b[520:528], b[512:520]); return b },
			"qcow2: L1[1]: L2 table offset 1024 is also the table of L1[0]"},
		{"data cluster beyond the file", func(b []byte) []byte { be.PutUint64(b[l2:], uint64(len(b))); return b },
			"guest offset 0: data cluster at"},
		{"data cluster on the L1 table", func(b []byte) []byte { be.PutUint64(b[l2:], 512); return b }, "overlaps the L1 table"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mut(bytes.Clone(good))
			_, err := readQcow2(bytes.NewReader(b), int64(len(b)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v\nwant containing %q", err, tc.wantErr)
			}
		})
	}
	// A negative size (never from Options, which refuses it) is an error too.
	if _, err := readQcow2(bytes.NewReader(good), -1); err == nil || !strings.Contains(err.Error(), "file size -1") {
		t.Errorf("negative file size: err = %v", err)
	}
}

// countingReaderAt records how much readQcow2 reads, and where.
type countingReaderAt struct {
	r     *bytes.Reader
	total int64
	bad   error
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.total += int64(len(p))
	if (off < 0 || off+int64(len(p)) > c.r.Size()) && c.bad == nil {
		c.bad = fmt.Errorf("read of %d bytes at %d: outside the %d-byte file", len(p), off, c.r.Size())
	}
	return c.r.ReadAt(p, off)
}

func FuzzReadQcow2(f *testing.F) {
	for _, b := range readFixtures(f) {
		f.Add(b)
	}
	cb, vs, cl := smallQcow2()
	good := buildQcow2(cb, vs, cl)
	f.Add(good)
	f.Add(buildQcow2(12, 1<<20, map[int64][]byte{1: {9}, 2: {8}, 255: {7}}))
	f.Add(buildQcow2(9, 0, nil))
	for _, off := range []int{24, 36, 40, 100} {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint64(b[off:], 1<<63)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &countingReaderAt{r: bytes.NewReader(b)}
		img, err := readQcow2(r, int64(len(b)))
		if r.bad != nil {
			t.Fatal(r.bad)
		}
		// Tables are read once each: the work is bounded by the file.
		if r.total > 2*int64(len(b))+qcowMaxHeader {
			t.Fatalf("read %d bytes of a %d-byte file", r.total, len(b))
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "qcow2: ") {
				t.Fatalf("error without the qcow2 prefix: %v", err)
			}
			return
		}
		checkQcowImage(t, img, b)
		if img.virtualSize > 8<<20 {
			return // a sparse giant: the invariants above cover it
		}
		got, err := readStream(img, b)
		if err != nil {
			t.Fatalf("stream of an accepted image over its own bytes: %v", err)
		}
		want := make([]byte, img.virtualSize)
		for _, e := range img.extents {
			copy(want[e.guest:e.guest+e.length], b[e.host:])
		}
		if !bytes.Equal(got, want) {
			t.Fatal("stream output differs from the extents applied to a zero image")
		}
	})
}

// checkQcowImage asserts what the streaming stage relies on.
func checkQcowImage(t *testing.T, img *qcowImage, b []byte) {
	t.Helper()
	size := int64(len(b))
	cs := img.clusterSize
	if cs < 512 || cs > 2<<20 || cs&(cs-1) != 0 {
		t.Fatalf("cluster size %d", cs)
	}
	if img.virtualSize < 0 || img.fileSize != size {
		t.Fatalf("virtual size %d, file size %d of %d", img.virtualSize, img.fileSize, size)
	}
	for i, r := range img.regions {
		if r.off < 0 || r.length <= 0 || r.off+r.length > size {
			t.Fatalf("region %s at %d+%d outside the %d-byte file", r.what, r.off, r.length, size)
		}
		if i > 0 && img.regions[i-1].off+img.regions[i-1].length > r.off {
			t.Fatalf("regions overlap or are out of order: %+v", img.regions)
		}
		if sha256.Sum256(b[r.off:r.off+r.length]) != r.sum {
			t.Fatalf("region %s sum is not of the file's bytes", r.what)
		}
	}
	for i, e := range img.extents {
		if e.guest < 0 || e.length <= 0 || e.guest+e.length > img.virtualSize || e.guest%cs != 0 {
			t.Fatalf("extent %+v outside the %d-byte guest", e, img.virtualSize)
		}
		if e.host <= 0 || e.host+e.length > size || e.host%cs != 0 {
			t.Fatalf("extent %+v outside the %d-byte file", e, size)
		}
		if i > 0 {
			p := img.extents[i-1]
			if p.guest+p.length > e.guest || p.host+p.length > e.host {
				t.Fatalf("extents out of order: %+v then %+v", p, e)
			}
		}
		for _, r := range img.regions {
			if r.off < e.host+e.length && e.host < r.off+r.length {
				t.Fatalf("extent %+v overlaps %s at %d", e, r.what, r.off)
			}
		}
	}
}
