package nvme

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// recAdmin records commands and answers from a script of responses.
type recAdmin struct {
	calls  []Command
	answer func(n int, cmd *Command) error
}

func (r *recAdmin) AdminCommand(cmd *Command) (uint32, error) {
	r.calls = append(r.calls, *cmd)
	if r.answer != nil {
		return 0, r.answer(len(r.calls)-1, cmd)
	}
	return 0, nil
}

func TestSecurityReceiveCommand(t *testing.T) {
	a := &recAdmin{answer: func(_ int, c *Command) error { c.Data[0] = 0xAA; return nil }}
	buf := make([]byte, 2048)
	if err := SecurityReceive(a, 0, 0x01, 0x0001, buf); err != nil {
		t.Fatal(err)
	}
	c := a.calls[0]
	// SECP 01h in bits 31:24, ComID 0001h in SPSP1:SPSP0 (bits 23:8).
	if c.Opcode != 0x82 || c.CDW10 != 0x01000100 || c.CDW11 != 2048 || c.NSID != 0 {
		t.Errorf("security receive = opcode %#x cdw10 %#x cdw11 %d nsid %d", c.Opcode, c.CDW10, c.CDW11, c.NSID)
	}
	if buf[0] != 0xAA {
		t.Error("data not returned through the caller's buffer")
	}
	if err := SecuritySend(a, 0, 0x02, 0x07fe, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if c := a.calls[1]; c.Opcode != 0x81 || c.CDW10 != 0x0207fe00 || c.CDW11 != 4 {
		t.Errorf("security send = opcode %#x cdw10 %#x cdw11 %d", c.Opcode, c.CDW10, c.CDW11)
	}
}

func TestSecurityReceiveInvalidOpcode(t *testing.T) {
	// QEMU 7.2 answers Security Receive with status 0x4001: DNR, Invalid Command Opcode.
	a := &recAdmin{answer: func(_ int, c *Command) error { return ParseStatus(c.Opcode, 0x4001) }}
	err := SecurityReceive(a, 0, 1, 1, make([]byte, 512))
	var st *StatusError
	if !errors.As(err, &st) || !st.InvalidOpcode() || st.Status() != 0x4001 {
		t.Fatalf("err = %v, want a wrapped Invalid Command Opcode", err)
	}
	if !strings.Contains(err.Error(), "security receive secp 0x01") {
		t.Errorf("error lacks context: %v", err)
	}
}

func TestFormatCDW10(t *testing.T) {
	cases := []struct {
		o    FormatOptions
		want uint32
	}{
		{FormatOptions{LBAF: 0, SES: SESUserData}, 0x200},
		{FormatOptions{LBAF: 1, SES: SESCrypto}, 0x401},
		{FormatOptions{LBAF: 18, MSET: true, PI: 1, PIL: true, SES: SESNone}, 0x1000 | 0x2 | 0x10 | 0x20 | 0x100},
	}
	for _, c := range cases {
		got, err := c.o.CDW10()
		if err != nil || got != c.want {
			t.Errorf("%+v: cdw10 = %#x, %v; want %#x", c.o, got, err, c.want)
		}
	}
	if _, err := (FormatOptions{LBAF: 64}).CDW10(); err == nil {
		t.Error("LBAF 64 accepted")
	}
}

func TestFormatNVMKeepsGeometry(t *testing.T) {
	// Namespace using format 1 (4 KiB), extended LBA, PI type 2 first.
	ns, err := ParseNamespace(1, namespaceVector(1<<20, 1, 0x11, 9<<16, 12<<16))
	if err != nil {
		t.Fatal(err)
	}
	ns.DPS = 0x2 | 0x8
	a := &recAdmin{}
	if err := FormatNVM(a, 1, FormatOptionsFor(ns, SESUserData)); err != nil {
		t.Fatal(err)
	}
	c := a.calls[0]
	want := uint32(1 | 1<<4 | 2<<5 | 1<<8 | 1<<9)
	if c.Opcode != 0x80 || c.NSID != 1 || c.CDW10 != want || c.TimeoutMs != FormatTimeoutMs {
		t.Errorf("format = opcode %#x nsid %d cdw10 %#x timeout %d; want cdw10 %#x", c.Opcode, c.NSID, c.CDW10, c.TimeoutMs, want)
	}
	if err := FormatNVM(a, 0, FormatOptions{}); err == nil {
		t.Error("nsid 0 accepted")
	}
}

func sanitizeLog(sprog uint16, sstat uint16, cdw10 uint32) []byte {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint16(b[0:], sprog)
	binary.LittleEndian.PutUint16(b[2:], sstat)
	binary.LittleEndian.PutUint32(b[4:], cdw10)
	return b
}

func TestSanitizeAndWait(t *testing.T) {
	logs := [][]byte{
		sanitizeLog(0x4000, 2, 4),      // in progress, 25 %
		sanitizeLog(0xC000, 2, 4),      // in progress, 75 %
		sanitizeLog(0xFFFF, 1|1<<8, 4), // done, global data erased
	}
	a := &recAdmin{answer: func(n int, c *Command) error {
		if c.Opcode == OpGetLogPage {
			copy(c.Data, logs[n-1])
		}
		return nil
	}}
	if err := Sanitize(a, SanitizeCryptoErase, false); err != nil {
		t.Fatal(err)
	}
	if c := a.calls[0]; c.Opcode != 0x84 || c.CDW10 != 4 {
		t.Errorf("sanitize = opcode %#x cdw10 %#x", c.Opcode, c.CDW10)
	}
	st, err := WaitSanitize(context.Background(), a, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != SanitizeSucceeded || !st.GlobalErase || st.CDW10 != 4 {
		t.Errorf("status = %+v", st)
	}
	if len(a.calls) != 4 {
		t.Errorf("polled %d times, want 3", len(a.calls)-1)
	}
	for _, c := range a.calls[1:] {
		if c.CDW10&0xff != 0x81 || c.NSID != 0xffffffff {
			t.Errorf("log page request cdw10 %#x nsid %#x", c.CDW10, c.NSID)
		}
	}
	if err := Sanitize(a, SanitizeOverwrite, false); err == nil {
		t.Error("overwrite accepted without pattern support")
	}
	nd := &recAdmin{}
	_ = Sanitize(nd, SanitizeBlockErase, true)
	if nd.calls[0].CDW10 != 2|1<<9 {
		t.Errorf("block erase + NDAS cdw10 = %#x", nd.calls[0].CDW10)
	}
}

func TestWaitSanitizeFailure(t *testing.T) {
	a := &recAdmin{answer: func(_ int, c *Command) error { copy(c.Data, sanitizeLog(0, 3, 2)); return nil }}
	st, err := WaitSanitize(context.Background(), a, time.Millisecond)
	if err == nil || st.State != SanitizeFailed || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("st %+v err %v", st, err)
	}
	stuck := &recAdmin{answer: func(_ int, c *Command) error { copy(c.Data, sanitizeLog(100, 2, 2)); return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := WaitSanitize(ctx, stuck, 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck sanitize: %v", err)
	}
}
