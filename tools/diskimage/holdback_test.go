package diskimage

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const gptSig = "EFI PART"

// gptDisk is a disk image of size bytes with a GPT header at LBA 1 and
// its backup at the last LBA, as an OS image or a previous install has.
func gptDisk(size int) []byte {
	b := diskLike(size)
	copy(b[512:], gptSig)
	copy(b[size-512:], gptSig)
	return b
}

// fakeDisk is a file standing in for a disk: size bytes of fill.
func fakeDisk(t *testing.T, fill []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, fill, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gptAt says where the disk shows a GPT header: the primary at LBA 1, the
// backup at its last LBA.
func gptAt(t *testing.T, disk string) (primary, backup bool) {
	t.Helper()
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.HasPrefix(b[512:], []byte(gptSig)), bytes.HasPrefix(b[len(b)-512:], []byte(gptSig))
}

// Without a chunk list the image's sha256 is known only at its end: until
// then the disk holds no partition table of the image, primary or backup
// (the first MiB and the disk's last MiB are held in memory), while the
// rest has landed. A failed write then leaves both ends of the disk zero
// (no GPT survives, the previous install's backup included); a verified
// one writes the held regions and the disk is the image.
func TestHeldGPTUntilVerified(t *testing.T) {
	const size = 16 << 20
	img := gptDisk(size)
	for _, tc := range []struct {
		name string
		sum  string
	}{{"wrong sha256", hexSum(append(bytes.Clone(img), 1))}, {"right sha256", hexSum(img)}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(size))
				w.Write(img[:size-1])
				w.(http.Flusher).Flush()
				<-release // the last byte waits: the write is all but done
				w.Write(img[size-1:])
			}))
			defer srv.Close()
			defer close(release)
			// The disk as the previous install left it: other data, its own GPTs.
			old := bytes.Repeat([]byte{0xAA}, size)
			copy(old[512:], gptSig)
			copy(old[size-512:], gptSig)
			disk := fakeDisk(t, old)
			var landed int64
			progress := make(chan int64, 64)
			done := make(chan error, 1)
			go func() {
				_, err := Write(context.Background(), Options{URL: srv.URL, SHA256: tc.sum, Size: size, Format: FormatRaw,
					Target: disk, BlockSize: 1 << 20, Buffered: true, Progress: func(n int64) {
						select {
						case progress <- n:
						default:
						}
					}})
				done <- err
			}()
			for landed < size-(2<<20) {
				select {
				case landed = <-progress:
				case err := <-done:
					t.Fatalf("the write ended before its last byte: %v", err)
				case <-time.After(30 * time.Second):
					t.Fatalf("the write stalled at %d bytes", landed)
				}
			}
			got, _ := os.ReadFile(disk)
			if !bytes.Equal(got[:invalidateBytes], old[:invalidateBytes]) || !bytes.Equal(got[size-invalidateBytes:], old[size-invalidateBytes:]) {
				t.Fatal("the image's first or last MiB reached the disk before its sha256 was checked")
			}
			// A zero range is settled with the data after it: the last
			// MiB reported may still be pending.
			landed -= 1 << 20
			if i := firstDiff(got[invalidateBytes:landed], img[invalidateBytes:landed]); i >= 0 {
				t.Fatalf("the image's middle has not landed: byte %d of %d differs", invalidateBytes+i, landed)
			}
			release <- struct{}{}
			err := <-done
			primary, backup := gptAt(t, disk)
			got, _ = os.ReadFile(disk)
			if tc.sum != hexSum(img) {
				if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
					t.Fatalf("err = %v, want a sha256 mismatch", err)
				}
				zero := make([]byte, invalidateBytes)
				if primary || backup || !bytes.Equal(got[:invalidateBytes], zero) || !bytes.Equal(got[size-invalidateBytes:], zero) {
					t.Fatalf("after the failed write: primary GPT %v, backup GPT %v; want both ends of the disk zero", primary, backup)
				}
				return
			}
			if err != nil || !bytes.Equal(got, img) || !primary || !backup {
				t.Fatalf("verified write: %v; disk is the image: %v", err, bytes.Equal(got, img))
			}
		})
	}
}

// An image smaller than the disk fails: the disk's last MiB, where the
// previous install's backup GPT is, is zeroed with the first.
func TestFailedWriteClearsDiskEnd(t *testing.T) {
	img := diskLike(3 << 20)
	srv := newRangeServer(t, map[string][]byte{"img": img})
	disk := fakeDisk(t, gptDisk(16<<20))
	_, err := Write(context.Background(), Options{URL: srv.URL + "/img", SHA256: hexSum(append(bytes.Clone(img), 0)), Size: int64(len(img)),
		Format: FormatRaw, Target: disk, BlockSize: 1 << 20})
	if err == nil {
		t.Fatal("a wrong sha256 was accepted")
	}
	if primary, backup := gptAt(t, disk); primary || backup {
		t.Fatalf("after the failed write: primary GPT %v, backup GPT %v", primary, backup)
	}
}

// The held regions take writes and zeroings that straddle their edges:
// the parts outside reach the disk at once, the parts inside only on
// commit, in order.
func TestHoldTargetSplits(t *testing.T) {
	const size = 4 << 20
	disk := fakeDisk(t, bytes.Repeat([]byte{0xAA}, size))
	ft, err := openTarget(disk, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	h := newHoldTarget(ft)
	if len(h.regions) != 2 || h.regions[1] != [2]int64{size - invalidateBytes, size} {
		t.Fatalf("regions %v", h.regions)
	}
	data := bytes.Repeat([]byte{7}, 2<<20)
	if _, err := h.WriteAt(data, invalidateBytes/2); err != nil { // half held, half not
		t.Fatal(err)
	}
	if err := h.ZeroRange(size-invalidateBytes-4096, 8192); err != nil { // straddles the tail
		t.Fatal(err)
	}
	got, _ := os.ReadFile(disk)
	if got[0] != 0xAA || got[invalidateBytes-1] != 0xAA || got[invalidateBytes] != 7 || got[size-invalidateBytes-1] != 0 || got[size-invalidateBytes] != 0xAA {
		t.Fatal("a held part reached the disk, or a passed part did not")
	}
	if err := h.commit(); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(disk)
	if got[invalidateBytes/2] != 7 || got[invalidateBytes/2-1] != 0xAA || got[size-invalidateBytes+4095] != 0 || got[size-invalidateBytes+4096] != 0xAA {
		t.Fatal("commit did not write the held parts")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
