package ata

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
	"unsafe"
)

func TestSGIOHeaderLayout(t *testing.T) {
	cdb := [16]byte{0x85}
	data := make([]byte, 512)
	sense := make([]byte, 64)
	h := newSGIOHdr(&cdb, DirOut, data, sense, 3*time.Hour)
	h.packID = 0x01020304
	b := encodeSGIOHdr(h)
	ne := binary.NativeEndian
	for _, c := range []struct {
		off       int
		got, want uint64
	}{
		{0, uint64(ne.Uint32(b[0:])), 'S'},
		{4, uint64(ne.Uint32(b[4:])), uint64(uint32(0xfffffffe))}, // SG_DXFER_TO_DEV
		{8, uint64(b[8]), 16},
		{9, uint64(b[9]), 64},
		{12, uint64(ne.Uint32(b[12:])), 512},
		{16, ne.Uint64(b[16:]), uint64(uintptr(unsafe.Pointer(&data[0])))},
		{24, ne.Uint64(b[24:]), uint64(uintptr(unsafe.Pointer(&cdb[0])))},
		{32, ne.Uint64(b[32:]), uint64(uintptr(unsafe.Pointer(&sense[0])))},
		{40, uint64(ne.Uint32(b[40:])), 3 * 3600 * 1000},
		{48, uint64(ne.Uint32(b[48:])), 0x01020304},
	} {
		if c.got != c.want {
			t.Errorf("offset %d = %#x, want %#x", c.off, c.got, c.want)
		}
	}
	// Non-data: SG_DXFER_NONE, no buffer.
	h = newSGIOHdr(&cdb, DirNone, nil, sense, time.Second)
	if h.dxferDirection != sgDxferNone || h.dxferp != 0 || h.dxferLen != 0 {
		t.Errorf("non-data header %+v", h)
	}
	if h = newSGIOHdr(&cdb, DirIn, data, sense, time.Second); h.dxferDirection != sgDxferFromDev {
		t.Errorf("data-in direction %d", h.dxferDirection)
	}
	if timeoutMs(100*24*time.Hour) != math.MaxUint32 || timeoutMs(0) != 30_000 {
		t.Error("timeout clamping")
	}
}
