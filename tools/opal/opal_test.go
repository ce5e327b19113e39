package opal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/cure-oss/cure/tools/nvme"
)

// level0 assembles a Level 0 Discovery response: the 48-byte header
// (length of the rest, revision 1, reserved, vendor) then descriptors.
func level0(descs ...[]byte) []byte {
	body := bytes.Join(descs, nil)
	b := make([]byte, 48, 48+len(body))
	binary.BigEndian.PutUint32(b[0:], uint32(44+len(body)))
	binary.BigEndian.PutUint32(b[4:], 1)
	return append(b, body...)
}

// desc is one feature descriptor: code, version<<4, length, data.
func desc(code uint16, version uint8, data ...byte) []byte {
	b := []byte{byte(code >> 8), byte(code), version << 4, byte(len(data))}
	return append(b, data...)
}

// opal2Locked is a Samsung-style Opal 2 drive that has been taken
// ownership of and locked, written out byte by byte from Core Spec 2.01
// 3.3.6 and Opal SSC 2.02 3.1.1 so the parser is not tested against
// itself.
var opal2Locked = []byte{
	// Header: length of parameter data 0x90 (144 + 4 = 148 bytes in all),
	// revision 00000001, 8 reserved, 32 vendor-specific bytes.
	0x00, 0x00, 0x00, 0x90, 0x00, 0x00, 0x00, 0x01,
	0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	// TPer 0x0001 v1 len 0x0C: sync + streaming.
	0x00, 0x01, 0x10, 0x0C, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	// Locking 0x0002 v1 len 0x0C: supported, enabled, locked, media
	// encryption, MBR enabled, MBR not done = 0b0001_1111.
	0x00, 0x02, 0x10, 0x0C, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	// Geometry 0x0003 v1 len 0x1C: align, LBS 512, granularity 8, lowest 0.
	0x00, 0x03, 0x10, 0x1C, 0x01, 0, 0, 0, 0, 0, 0, 0,
	0x00, 0x00, 0x02, 0x00,
	0, 0, 0, 0, 0, 0, 0, 0x08,
	0, 0, 0, 0, 0, 0, 0, 0,
	// Opal SSC v2 0x0203 v1 len 0x10: base ComID 0x1000, 1 ComID, no range
	// crossing, 4 admins, 9 users, initial SID = MSID (00), revert -> MSID (00).
	0x02, 0x03, 0x10, 0x10, 0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x04, 0x00, 0x09, 0x00, 0x00, 0, 0, 0, 0, 0,
	// Block SID 0x0402 v1 len 0x0C: SID value changed, not blocked.
	0x04, 0x02, 0x10, 0x0C, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
}

func TestOpalDiscovery(t *testing.T) {
	t.Run("opal2-locked", func(t *testing.T) {
		if len(opal2Locked) != 148 {
			t.Fatalf("vector is %d bytes", len(opal2Locked))
		}
		buf := make([]byte, DiscoveryBufferSize) // the drive pads the rest with zeros
		copy(buf, opal2Locked)
		d, err := ParseDiscovery(buf)
		if err != nil {
			t.Fatal(err)
		}
		l := d.Locking
		if l == nil || !l.Supported || !l.Enabled || !l.Locked || !l.MediaEncryption || !l.MBREnabled || l.MBRDone {
			t.Errorf("locking = %+v", l)
		}
		s := d.PrimarySSC()
		if s == nil || s.Name != "Opal 2" || s.BaseComID != 0x1000 || s.NumComIDs != 1 || s.AdminAuthorities != 4 || s.UserAuthorities != 9 || !s.InitialPINIsMSID || !s.RevertPINToMSID {
			t.Errorf("ssc = %+v", s)
		}
		if g := d.Geometry; g == nil || !g.Align || g.LogicalBlockSize != 512 || g.AlignmentGranularity != 8 {
			t.Errorf("geometry = %+v", g)
		}
		if !d.TPer.Sync || !d.TPer.Streaming || d.TPer.Async {
			t.Errorf("tper = %+v", d.TPer)
		}
		if d.BlockSID == nil || !d.BlockSID.SIDValueChanged {
			t.Errorf("block sid = %+v", d.BlockSID)
		}
		if ok, why := d.FactoryState(); ok || why != "locking is enabled" {
			t.Errorf("factory state = %t %q", ok, why)
		}
		if !d.SupportsRevert() || !d.CryptoErasesOnRevert() {
			t.Error("Opal 2 must support a crypto-erasing revert")
		}
		want := "ssc=Opal 2 comid=0x1000+1 locking supported=true enabled=true locked=true mbr enabled=true done=false sid-changed=true sid-blocked=false"
		if d.Summary() != want {
			t.Errorf("summary\n got %s\nwant %s", d.Summary(), want)
		}
	})

	t.Run("opal2-factory", func(t *testing.T) {
		d, err := ParseDiscovery(level0(
			desc(FeatureTPer, 1, append([]byte{0x01}, make([]byte, 11)...)...),
			desc(FeatureLocking, 1, append([]byte{0x09}, make([]byte, 11)...)...), // supported + media encryption
			desc(FeatureOpalV2, 1, 0x07, 0xFE, 0x00, 0x01, 0, 0, 4, 0, 8, 0, 0, 0, 0, 0, 0, 0),
			desc(FeatureDataRemoval, 1, append([]byte{0, 0, RemovalCryptoErase}, make([]byte, 29)...)...),
		))
		if err != nil {
			t.Fatal(err)
		}
		if l := d.Locking; !l.Supported || l.Enabled || l.Locked || l.MBREnabled {
			t.Errorf("locking = %+v", l)
		}
		if d.SSCName() != "Opal 2" || d.PrimarySSC().BaseComID != 0x07FE {
			t.Errorf("ssc = %+v", d.PrimarySSC())
		}
		if ok, why := d.FactoryState(); !ok {
			t.Errorf("factory state = false (%s)", why)
		}
		if d.DataRemoval == nil || d.DataRemoval.Mechanisms != RemovalCryptoErase {
			t.Errorf("data removal = %+v", d.DataRemoval)
		}
	})

	t.Run("pyrite2", func(t *testing.T) {
		d, err := ParseDiscovery(level0(
			desc(FeatureTPer, 1, append([]byte{0x01}, make([]byte, 11)...)...),
			desc(FeatureLocking, 1, append([]byte{0x01}, make([]byte, 11)...)...), // no media encryption
			desc(FeaturePyriteV2, 1, 0x00, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0xFF, 0x00, 0, 0, 0, 0, 0),
			desc(FeatureDataRemoval, 1, append([]byte{0, 0, RemovalOverwrite | RemovalBlockErase}, make([]byte, 29)...)...),
		))
		if err != nil {
			t.Fatal(err)
		}
		s := d.PrimarySSC()
		if s.Name != "Pyrite 2" || s.BaseComID != 1 || s.InitialPINIsMSID || !s.RevertPINToMSID || s.AdminAuthorities != 0 {
			t.Errorf("ssc = %+v", s)
		}
		if d.Locking.MediaEncryption || !d.SupportsRevert() || d.CryptoErasesOnRevert() {
			t.Error("Pyrite without crypto erase mechanism must not count as crypto erase on revert")
		}
	})

	t.Run("ruby", func(t *testing.T) {
		d, err := ParseDiscovery(level0(
			desc(FeatureTPer, 1, append([]byte{0x01}, make([]byte, 11)...)...),
			desc(FeatureLocking, 2, append([]byte{0x0B}, make([]byte, 11)...)...), // supported, enabled, media enc
			desc(0x0404+0x100, 1, 1, 2, 3),                                        // unknown feature: skipped, recorded
			desc(FeatureRuby, 1, 0x08, 0x00, 0x00, 0x02, 1, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0),
		))
		if err != nil {
			t.Fatal(err)
		}
		if d.SSCName() != "Ruby" || d.PrimarySSC().NumComIDs != 2 || !d.PrimarySSC().RangeCrossing {
			t.Errorf("ssc = %+v", d.PrimarySSC())
		}
		if !d.Locking.Enabled || d.Locking.Locked {
			t.Errorf("locking = %+v", d.Locking)
		}
		if len(d.Features) != 4 || d.Features[2] != 0x0504 {
			t.Errorf("features = %#v", d.Features)
		}
		if !d.CryptoErasesOnRevert() {
			t.Error("Ruby encrypts all media")
		}
	})

	bad := []struct {
		name  string
		b     []byte
		want  string
		noTCG bool
	}{
		{"short", opal2Locked[:40], "shorter than the 48-byte header", false},
		{"all-zero", make([]byte, 2048), "length of parameter data is 0", true},
		{"truncated", opal2Locked[:100], "truncated response", false},
		{"garbage", bytes.Repeat([]byte{0xA5}, 2048), "truncated response", false},
		{"descriptor-overrun", func() []byte {
			b := level0(desc(FeatureTPer, 1, make([]byte, 12)...))
			b[48+3] = 0x40 // TPer claims 64 bytes of data
			return b
		}(), "runs past the end", false},
		{"short-opal2", level0(desc(FeatureTPer, 1, 1), desc(FeatureOpalV2, 1, 0, 1)), "needs at least 11", false},
		{"no-tper", level0(desc(FeatureLocking, 1, make([]byte, 12)...)), "no TPer feature descriptor", true},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseDiscovery(c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if errors.Is(err, ErrNoTCG) != c.noTCG {
				t.Errorf("errors.Is(ErrNoTCG) = %t, want %t", !c.noTCG, c.noTCG)
			}
		})
	}
}

// fakeAdmin plays an NVMe controller for Security Receive.
type fakeAdmin struct {
	answer []byte
	status uint32
	cmds   []nvme.Command
}

func (f *fakeAdmin) AdminCommand(cmd *nvme.Command) (uint32, error) {
	f.cmds = append(f.cmds, *cmd)
	if st := nvme.ParseStatus(cmd.Opcode, f.status); st != nil {
		return 0, st
	}
	copy(cmd.Data, f.answer)
	return 0, nil
}

func TestDiscoverThroughNVMe(t *testing.T) {
	a := &fakeAdmin{answer: opal2Locked}
	d, err := Discover(NVMeTransport{Admin: a})
	if err != nil {
		t.Fatal(err)
	}
	c := a.cmds[0]
	if c.Opcode != 0x82 || c.CDW10 != 0x01000100 || c.CDW11 != DiscoveryBufferSize || len(c.Data) != DiscoveryBufferSize {
		t.Errorf("security receive = %#x cdw10 %#x cdw11 %d", c.Opcode, c.CDW10, c.CDW11)
	}
	if !d.Locking.Locked {
		t.Error("lock state lost")
	}
	// QEMU's controller: status 0x4001 (DNR, Invalid Command Opcode).
	_, err = Discover(NVMeTransport{Admin: &fakeAdmin{status: 0x4001}})
	var st *nvme.StatusError
	if !errors.Is(err, ErrNoTCG) || !errors.As(err, &st) || st.Status() != 0x4001 {
		t.Fatalf("err = %v, want ErrNoTCG carrying NVMe status 0x4001", err)
	}
}

// fakeSG plays a SCSI disk for SG_IO.
type fakeSG struct {
	answer []byte
	result SCSIResult
	cmds   []SCSICommand
}

func (f *fakeSG) SGIO(cmd *SCSICommand) (*SCSIResult, error) {
	f.cmds = append(f.cmds, *cmd)
	copy(cmd.Data, f.answer)
	r := f.result
	n := copy(cmd.Sense, r.Sense)
	r.Sense = cmd.Sense[:n]
	return &r, nil
}

func TestDiscoverThroughSCSI(t *testing.T) {
	sg := &fakeSG{answer: opal2Locked}
	if _, err := Discover(SCSITransport{Dev: sg}); err != nil {
		t.Fatal(err)
	}
	want := []byte{0xA2, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00}
	if c := sg.cmds[0]; !bytes.Equal(c.CDB, want) || c.Dir != DirFromDev {
		t.Errorf("CDB = % x dir %d, want % x", c.CDB, c.Dir, want)
	}
	if err := (SCSITransport{Dev: sg}).SecuritySend(2, 0x07FE, make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	want = []byte{0xB5, 0x02, 0x07, 0xFE, 0, 0, 0, 0, 0x02, 0x00, 0, 0}
	if c := sg.cmds[1]; !bytes.Equal(c.CDB, want) || c.Dir != DirToDev {
		t.Errorf("CDB = % x, want % x", c.CDB, want)
	}

	// CHECK CONDITION, fixed sense: ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE.
	fixed := make([]byte, 18)
	fixed[0], fixed[2], fixed[12] = 0x70, 0x05, 0x20
	_, err := Discover(SCSITransport{Dev: &fakeSG{result: SCSIResult{Status: 2, DriverStatus: 0x08, Sense: fixed}}})
	var se *SenseError
	if !errors.Is(err, ErrNoTCG) || !errors.As(err, &se) || se.ASC != 0x20 {
		t.Fatalf("err = %v", err)
	}
	// Descriptor sense: NOT READY 04/01 is a real failure, not "no TCG".
	_, err = Discover(SCSITransport{Dev: &fakeSG{result: SCSIResult{Status: 2, Sense: []byte{0x72, 0x02, 0x04, 0x01}}}})
	if err == nil || errors.Is(err, ErrNoTCG) || !strings.Contains(err.Error(), "NOT READY") {
		t.Fatalf("err = %v", err)
	}
}

// fakeIoctler records sed-opal ioctls and answers with a scripted return.
type fakeIoctler struct {
	req   uint32
	arg   []byte
	ret   int
	errno error
	psid  string // when set, answer NOT_AUTHORIZED unless the key matches
	state uint32 // GET_STATUS flags
}

func (f *fakeIoctler) Ioctl(req uint32, arg []byte) (int, error) {
	f.req, f.arg = req, append([]byte(nil), arg...)
	if f.errno != nil {
		return 0, f.errno
	}
	if req == IocGetStatus {
		binary.NativeEndian.PutUint32(arg, f.state)
		return 0, nil
	}
	if f.psid != "" && string(arg[8:8+int(arg[1])]) != f.psid {
		return StatusNotAuthorized, nil
	}
	return f.ret, nil
}

func TestOpalPSIDRevert(t *testing.T) {
	// Numbers from linux/include/uapi/linux/sed-opal.h (6.1) via
	// asm-generic/ioctl.h: _IOW('p', 232, struct opal_key[264]).
	if IocPSIDRevertTPer != 0x410870E8 || IocRevertTPer != 0x410870E2 || IocGetStatus != 0x800870EC {
		t.Fatalf("ioctl numbers %#x %#x %#x", IocPSIDRevertTPer, IocRevertTPer, IocGetStatus)
	}
	const psid = "0123456789ABCDEFGHJKLMNPQRSTUVWX"
	f := &fakeIoctler{psid: psid}
	if err := PSIDRevert(f, psid); err != nil {
		t.Fatal(err)
	}
	if f.req != IocPSIDRevertTPer {
		t.Errorf("request %#x, want IOC_OPAL_PSID_REVERT_TPR", f.req)
	}
	if len(f.arg) != 264 {
		t.Fatalf("opal_key is %d bytes, want 264", len(f.arg))
	}
	want := make([]byte, 264)
	want[0], want[1] = 0, 32 // lr 0, key_len 32, __align[6] zero
	copy(want[8:], psid)
	if !bytes.Equal(f.arg, want) {
		t.Errorf("opal_key = % x\nwant % x", f.arg[:48], want[:48])
	}

	err := PSIDRevert(&fakeIoctler{psid: psid}, "0123456789ABCDEFGHJKLMNPQRSTUVWY")
	if !IsStatus(err, StatusNotAuthorized) || !strings.Contains(err.Error(), "0x01 NOT_AUTHORIZED") || !strings.Contains(err.Error(), "psid revert") {
		t.Fatalf("wrong PSID: err = %v", err)
	}
	if err := PSIDRevert(&fakeIoctler{ret: 0x12}, psid); !strings.Contains(fmtErr(err), "AUTHORITY_LOCKED_OUT") {
		t.Errorf("locked out: %v", err)
	}
	if err := PSIDRevert(&fakeIoctler{errno: syscall.ENOTTY}, psid); !errors.Is(err, ErrNoTCG) || !errors.Is(err, syscall.ENOTTY) {
		t.Errorf("no opal: %v", err)
	}
	// Linux 6.1 answers a device without Opal with ENOTSUPP (524), as on QEMU.
	if _, err := GetStatus(&fakeIoctler{errno: syscall.Errno(524)}); !errors.Is(err, ErrNoTCG) {
		t.Errorf("ENOTSUPP: %v", err)
	}
	for _, bad := range []string{"", " " + psid, strings.Repeat("x", 257)} {
		f := &fakeIoctler{}
		if err := PSIDRevert(f, bad); err == nil || f.req != 0 {
			t.Errorf("PSID %q: err %v, ioctl issued %#x", bad, err, f.req)
		}
	}

	// RevertTPer with the SID goes through IOC_OPAL_REVERT_TPR.
	f = &fakeIoctler{}
	if err := RevertTPer(f, "owner-secret"); err != nil || f.req != IocRevertTPer || f.arg[1] != 12 || string(f.arg[8:20]) != "owner-secret" {
		t.Errorf("revert tper: err %v req %#x arg % x", err, f.req, f.arg[:24])
	}

	st, err := GetStatus(&fakeIoctler{state: 0x01 | 0x02 | 0x20})
	if err != nil || !st.Supported || !st.LockingSupported || st.LockingEnabled || !st.MBRDone {
		t.Errorf("status %+v err %v", st, err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
