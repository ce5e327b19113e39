package ata

import (
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/sgio"
)

func TestSGIORequest(t *testing.T) {
	cdb := [16]byte{0x85, 0x0a}
	data := make([]byte, 512)
	for _, c := range []struct {
		dir     Direction
		timeout time.Duration
		wantDir sgio.Direction
		data    bool
		wantTO  time.Duration
	}{
		{DirIn, time.Minute, sgio.DirFromDev, true, time.Minute},
		{DirOut, 3 * time.Hour, sgio.DirToDev, true, 3 * time.Hour},
		// Non-data: no buffer goes down even if one is passed.
		{DirNone, time.Second, sgio.DirNone, false, time.Second},
		// No timeout (or under a millisecond): 30 s, not the kernel's default.
		{DirIn, 0, sgio.DirFromDev, true, defaultTimeout},
		{DirIn, time.Microsecond, sgio.DirFromDev, true, defaultTimeout},
	} {
		r := request(cdb, c.dir, data, c.timeout)
		if r.Dir != c.wantDir || (len(r.Data) > 0) != c.data || r.Timeout != c.wantTO {
			t.Errorf("dir %d timeout %v: request dir %d, %d data bytes, timeout %v", c.dir, c.timeout, r.Dir, len(r.Data), r.Timeout)
		}
		if string(r.CDB) != string(cdb[:]) || len(r.Sense) != 64 {
			t.Errorf("CDB % x, %d sense bytes", r.CDB, len(r.Sense))
		}
	}
}
