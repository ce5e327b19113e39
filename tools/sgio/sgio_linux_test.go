//go:build linux

package sgio

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestNewHdr(t *testing.T) {
	r := &Request{CDB: make([]byte, 12), Dir: DirFromDev, Data: make([]byte, 512), Sense: make([]byte, 32), Timeout: 3 * time.Hour}
	h, err := newHdr(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.interfaceID != 'S' || h.dxferDirection != -3 || h.cmdLen != 12 || h.mxSbLen != 32 || h.dxferLen != 512 || h.timeout != 3*3600*1000 {
		t.Errorf("header %+v", h)
	}
	if h.dxferp != unsafe.Pointer(&r.Data[0]) || h.cmdp != unsafe.Pointer(&r.CDB[0]) || h.sbp != unsafe.Pointer(&r.Sense[0]) {
		t.Error("buffer addresses")
	}

	// No data: SG_DXFER_NONE whatever Dir says; no sense buffer: none offered.
	h, err = newHdr(&Request{CDB: make([]byte, 16), Dir: DirToDev, Sense: make([]byte, 300)})
	if err != nil {
		t.Fatal(err)
	}
	if h.dxferDirection != -1 || h.dxferp != nil || h.dxferLen != 0 || h.mxSbLen != 255 || h.timeout != 0 {
		t.Errorf("non-data header %+v", h)
	}
	if h, _ = newHdr(&Request{CDB: []byte{0}}); h.sbp != nil || h.mxSbLen != 0 {
		t.Errorf("sense-less header %+v", h)
	}

	for _, n := range []int{0, 17} {
		if _, err := newHdr(&Request{CDB: make([]byte, n)}); err == nil || !strings.Contains(err.Error(), "CDB length") {
			t.Errorf("CDB of %d bytes: err = %v", n, err)
		}
	}
}

func TestTimeoutMs(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want uint32
	}{
		{0, 0}, {-time.Second, 0}, {time.Microsecond, 0}, {1500 * time.Microsecond, 1},
		{30 * time.Second, 30_000}, {100 * 24 * time.Hour, math.MaxUint32},
	} {
		if got := timeoutMs(c.d); got != c.want {
			t.Errorf("timeoutMs(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestDoErrno runs the real ioctl on a node that is no SCSI device.
func TestDoErrno(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	_, err = Do(f, &Request{CDB: make([]byte, 6), Sense: make([]byte, 32)})
	if !errors.Is(err, unix.ENOTTY) || !strings.HasPrefix(err.Error(), "SG_IO on /dev/null: ") {
		t.Errorf("err = %v, want ENOTTY naming /dev/null", err)
	}
}

func TestOpenDevice(t *testing.T) {
	f, err := OpenDevice("/dev/null", "test")
	if err != nil {
		t.Skip(err)
	}
	f.Close()
	file := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		file:        "open " + file + " for test: expected a device node, found mode -rw-------",
		file + ".x": "open " + file + ".x for test: open " + file + ".x: no such file or directory",
	} {
		if _, err := OpenDevice(path, "test"); err == nil || err.Error() != want {
			t.Errorf("err = %v, want %s", err, want)
		}
	}
}
