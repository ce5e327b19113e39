package sgio

import (
	"testing"
	"unsafe"
)

// TestHeaderLayout pins hdr to struct sg_io_hdr as gcc lays it out on
// x86-64 (offsetof/sizeof of each field, scsi/sg.h).
func TestHeaderLayout(t *testing.T) {
	var h hdr
	for _, c := range []struct {
		name       string
		off, size  uintptr
		wOff, wSiz uintptr
	}{
		{"interface_id", unsafe.Offsetof(h.interfaceID), unsafe.Sizeof(h.interfaceID), 0, 4},
		{"dxfer_direction", unsafe.Offsetof(h.dxferDirection), unsafe.Sizeof(h.dxferDirection), 4, 4},
		{"cmd_len", unsafe.Offsetof(h.cmdLen), unsafe.Sizeof(h.cmdLen), 8, 1},
		{"mx_sb_len", unsafe.Offsetof(h.mxSbLen), unsafe.Sizeof(h.mxSbLen), 9, 1},
		{"iovec_count", unsafe.Offsetof(h.iovecCount), unsafe.Sizeof(h.iovecCount), 10, 2},
		{"dxfer_len", unsafe.Offsetof(h.dxferLen), unsafe.Sizeof(h.dxferLen), 12, 4},
		{"dxferp", unsafe.Offsetof(h.dxferp), unsafe.Sizeof(h.dxferp), 16, 8},
		{"cmdp", unsafe.Offsetof(h.cmdp), unsafe.Sizeof(h.cmdp), 24, 8},
		{"sbp", unsafe.Offsetof(h.sbp), unsafe.Sizeof(h.sbp), 32, 8},
		{"timeout", unsafe.Offsetof(h.timeout), unsafe.Sizeof(h.timeout), 40, 4},
		{"flags", unsafe.Offsetof(h.flags), unsafe.Sizeof(h.flags), 44, 4},
		{"pack_id", unsafe.Offsetof(h.packID), unsafe.Sizeof(h.packID), 48, 4},
		{"usr_ptr", unsafe.Offsetof(h.usrPtr), unsafe.Sizeof(h.usrPtr), 56, 8},
		{"status", unsafe.Offsetof(h.status), unsafe.Sizeof(h.status), 64, 1},
		{"masked_status", unsafe.Offsetof(h.maskedStatus), unsafe.Sizeof(h.maskedStatus), 65, 1},
		{"msg_status", unsafe.Offsetof(h.msgStatus), unsafe.Sizeof(h.msgStatus), 66, 1},
		{"sb_len_wr", unsafe.Offsetof(h.sbLenWr), unsafe.Sizeof(h.sbLenWr), 67, 1},
		{"host_status", unsafe.Offsetof(h.hostStatus), unsafe.Sizeof(h.hostStatus), 68, 2},
		{"driver_status", unsafe.Offsetof(h.driverStatus), unsafe.Sizeof(h.driverStatus), 70, 2},
		{"resid", unsafe.Offsetof(h.resid), unsafe.Sizeof(h.resid), 72, 4},
		{"duration", unsafe.Offsetof(h.duration), unsafe.Sizeof(h.duration), 76, 4},
		{"info", unsafe.Offsetof(h.info), unsafe.Sizeof(h.info), 80, 4},
		{"struct", 0, unsafe.Sizeof(h), 0, 88},
	} {
		if c.off != c.wOff || c.size != c.wSiz {
			t.Errorf("%s at %d size %d, kernel has %d size %d", c.name, c.off, c.size, c.wOff, c.wSiz)
		}
	}
}
