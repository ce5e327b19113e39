package nvme

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// logAdmin answers Get Log Page with a fixed page and records the command.
type logAdmin struct {
	page   []byte
	status uint32
	got    *Command
}

func (f *logAdmin) AdminCommand(cmd *Command) (uint32, error) {
	c := *cmd
	f.got = &c
	if st := ParseStatus(cmd.Opcode, f.status); st != nil {
		return 0, st
	}
	copy(cmd.Data, f.page)
	return 0, nil
}

// smartVector lays out a SMART / Health log at the NVMe 2.0 Figure 207 offsets.
func smartVector() []byte {
	b := make([]byte, SMARTLogSize)
	le := binary.LittleEndian
	b[0] = WarnSpareBelowThreshold | WarnReadOnly
	le.PutUint16(b[1:], 323) // 50 °C
	b[3], b[4], b[5] = 7, 10, 104
	le.PutUint64(b[32:], 1000)
	le.PutUint64(b[128:], 26280) // three years powered on
	le.PutUint64(b[160:], 12)    // media errors
	le.PutUint64(b[176:], 40)
	b[191] = 1 // error-log entries beyond 2^64: saturates
	le.PutUint32(b[192:], 5)
	le.PutUint16(b[200:], 310)
	return b
}

func TestSMARTLog(t *testing.T) {
	a := &logAdmin{page: smartVector()}
	l, err := GetSMARTLog(a)
	if err != nil {
		t.Fatal(err)
	}
	// The command: opcode 02h, controller-wide NSID, LID 02h, RAE set,
	// NUMDL = 127 (512 bytes as zero-based dwords).
	if a.got.Opcode != OpGetLogPage || a.got.NSID != NSIDAll || a.got.CDW10 != 0x007f8002 || a.got.CDW11 != 0 || len(a.got.Data) != 512 {
		t.Errorf("command = opcode %#x nsid %#x cdw10 %#08x cdw11 %#x len %d", a.got.Opcode, a.got.NSID, a.got.CDW10, a.got.CDW11, len(a.got.Data))
	}
	want := SMARTLog{
		CriticalWarning: 0x09, CompositeTempK: 323, AvailableSpare: 7, AvailableSpareThreshold: 10,
		PercentageUsed: 104, DataUnitsRead: 1000, PowerOnHours: 26280, MediaErrors: 12,
		ErrorLogEntries: ^uint64(0), WarningTempMinutes: 5, TempSensorsK: [8]uint16{310},
	}
	if !reflect.DeepEqual(*l, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", *l, want)
	}
	if got := l.WarningNames(); !reflect.DeepEqual(got, []string{"spare below threshold", "read-only"}) {
		t.Errorf("WarningNames = %q", got)
	}
	if l.CompositeTempC() != 50 {
		t.Errorf("CompositeTempC = %d, want 50", l.CompositeTempC())
	}
}

func TestGetLogPageErrors(t *testing.T) {
	if err := GetLogPage(&logAdmin{}, LogSMARTHealth, NSIDAll, make([]byte, 6)); err == nil {
		t.Error("6-byte buffer accepted; want a multiple-of-4 error")
	}
	// Invalid Log Page (SCT 1, SC 09h) comes back as a *StatusError.
	_, err := GetSMARTLog(&logAdmin{status: 0x109})
	var st *StatusError
	if !errors.As(err, &st) || st.Name() != "Invalid Log Page" {
		t.Errorf("err = %v, want Invalid Log Page status", err)
	}
	if _, err := ParseSMARTLog(make([]byte, 100)); err == nil {
		t.Error("short log accepted")
	}
}
