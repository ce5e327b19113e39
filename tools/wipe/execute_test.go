package wipe

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

// memBlock is a disk in memory.
type memBlock struct{ b []byte }

func (m *memBlock) ReadAt(p []byte, off int64) (int, error)  { return copy(p, m.b[off:]), nil }
func (m *memBlock) WriteAt(p []byte, off int64) (int, error) { return copy(m.b[off:], p), nil }
func (m *memBlock) Sync() error                              { return nil }
func (m *memBlock) Size() int64                              { return int64(len(m.b)) }

// fakeCtrl is an NVMe controller over a memBlock: Format NVM zeroes it
// (unless lazy), Sanitize answers with sanitizeStatus.
type fakeCtrl struct {
	disk           *memBlock
	lazy           bool   // accept Format but erase nothing
	sanitizeStatus uint32 // 0x4001 = QEMU's Invalid Command Opcode
	cmds           []nvme.Command
}

func (f *fakeCtrl) AdminCommand(c *nvme.Command) (uint32, error) {
	f.cmds = append(f.cmds, *c)
	switch c.Opcode {
	case nvme.OpFormatNVM:
		if !f.lazy {
			clear(f.disk.b)
		}
	case nvme.OpSanitize:
		if st := nvme.ParseStatus(c.Opcode, f.sanitizeStatus); st != nil {
			return 0, st
		}
		clear(f.disk.b)
	case nvme.OpGetLogPage:
		binary.LittleEndian.PutUint16(c.Data[2:], uint16(nvme.SanitizeSucceeded))
	default:
		return 0, nvme.ParseStatus(c.Opcode, 0x4001)
	}
	return 0, nil
}

// fakeSED is a self-encrypting drive: sed-opal ioctls and Level 0
// Discovery over one state. A successful revert replaces the disk's
// content with noise, as a new media key does.
type fakeSED struct {
	disk            *memBlock
	psid            string
	enabled, locked bool
	reqs            []uint32
}

func (f *fakeSED) Ioctl(req uint32, arg []byte) (int, error) {
	f.reqs = append(f.reqs, req)
	if req != opal.IocPSIDRevertTPer || string(arg[8:8+int(arg[1])]) != f.psid {
		return opal.StatusNotAuthorized, nil
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range f.disk.b {
		f.disk.b[i] = byte(r.Uint32())
	}
	f.enabled, f.locked = false, false
	return 0, nil
}

func (f *fakeSED) SecurityReceive(protocol uint8, sp uint16, buf []byte) error {
	lock := byte(0x01 | 0x08) // supported, media encryption
	if f.enabled {
		lock |= 0x02
	}
	if f.locked {
		lock |= 0x04
	}
	descs := [][]byte{
		{0x00, 0x01, 0x10, 0x0C, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x00, 0x02, 0x10, 0x0C, lock, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x02, 0x03, 0x10, 0x10, 0x10, 0x00, 0x00, 0x01, 0, 0, 4, 0, 8, 0, 0, 0, 0, 0, 0, 0},
	}
	body := bytes.Join(descs, nil)
	binary.BigEndian.PutUint32(buf, uint32(44+len(body)))
	binary.BigEndian.PutUint32(buf[4:], 1)
	copy(buf[48:], body)
	return nil
}

func (f *fakeSED) SecuritySend(uint8, uint16, []byte) error { return nil }

func testNamespace(t *testing.T) *nvme.Namespace {
	b := make([]byte, nvme.IdentifySize)
	binary.LittleEndian.PutUint64(b[0:], 16<<20/512)
	binary.LittleEndian.PutUint32(b[128:], 9<<16)
	ns, err := nvme.ParseNamespace(1, b)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func newDisk(t *testing.T) *memBlock {
	m := &memBlock{b: make([]byte, 16<<20)}
	for i := range m.b {
		m.b[i] = byte(i * 7) // pre-existing "user data"
	}
	return m
}

func TestExecuteFormat(t *testing.T) {
	disk := newDisk(t)
	ctrl := &fakeCtrl{disk: disk}
	tgt := Target{Disk: nvmeDisk("nvme0n1", "S1"), OpalErr: noTCG, NVMe: qemuNVMe()}
	p, err := PlanWipe(tgt, Policy{Method: PolicyFormat})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Execute(context.Background(), p, Handles{Block: disk, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{}, Options{Samples: 8, AllowDestructive: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Method != MethodFormatUserData || len(res.Attempts) != 1 {
		t.Fatalf("result %+v", res)
	}
	var fmtCmd *nvme.Command
	for i := range ctrl.cmds {
		if ctrl.cmds[i].Opcode == nvme.OpFormatNVM {
			fmtCmd = &ctrl.cmds[i]
		}
	}
	if fmtCmd == nil || fmtCmd.NSID != 1 || fmtCmd.CDW10 != 1<<9 {
		t.Fatalf("format command %+v, want NSID 1 CDW10 SES=1 (0x200)", fmtCmd)
	}
	ev := strings.Join(res.Evidence, "\n")
	for _, want := range []string{"written and read back at 10 regions", "first MiB [0, +1048576): marker gone, now all zeros", "last MiB [15728640, +1048576): marker gone", "random block @"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if len(res.Marker) != 32 {
		t.Errorf("marker token %q", res.Marker)
	}
}

func TestExecuteDetectsSurvivingMarker(t *testing.T) {
	disk := newDisk(t)
	ctrl := &fakeCtrl{disk: disk, lazy: true} // says it formatted, did nothing
	p, err := PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S1"), OpalErr: noTCG, NVMe: qemuNVMe()}, Policy{Method: PolicyFormat})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Execute(context.Background(), p, Handles{Block: disk, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{}, Options{AllowDestructive: true})
	if err == nil || res.Verified || !strings.Contains(err.Error(), "verification failed: first MiB") || !strings.Contains(err.Error(), "MARKER STILL PRESENT in 256 of 256 blocks") {
		t.Fatalf("err = %v, verified %t", err, res.Verified)
	}
}

func TestExecuteFallsBackOnlyWhenUnsupported(t *testing.T) {
	disk := newDisk(t)
	// A controller that claims sanitize but rejects it like QEMU does.
	ctrl := &fakeCtrl{disk: disk, sanitizeStatus: 0x4001}
	p, err := PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S1"), OpalErr: noTCG, NVMe: fullNVMe()}, Policy{Method: PolicyCryptoErase})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Execute(context.Background(), p, Handles{Block: disk, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{}, Options{AllowDestructive: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != MethodFormatCrypto || len(res.Attempts) != 2 || !strings.Contains(res.Attempts[0].Error, "Invalid Command Opcode") {
		t.Fatalf("result %+v", res)
	}
	// Sanitize failing for a real reason (Sanitize Failed, 0x1c) stops the run.
	ctrl = &fakeCtrl{disk: newDisk(t), sanitizeStatus: 0x1c}
	res, err = Execute(context.Background(), p, Handles{Block: ctrl.disk, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{}, Options{AllowDestructive: true})
	if err == nil || len(res.Attempts) != 1 || !strings.Contains(err.Error(), "Sanitize Failed") {
		t.Fatalf("err %v attempts %+v", err, res.Attempts)
	}
}

func TestExecutePSIDRevert(t *testing.T) {
	const psid = "PSIDPSIDPSIDPSIDPSIDPSIDPSIDPSID"
	disk := newDisk(t)
	sed := &fakeSED{disk: disk, psid: psid, enabled: true, locked: true}
	d, err := opal.Discover(sed)
	if err != nil {
		t.Fatal(err)
	}
	tgt := Target{Disk: nvmeDisk("nvme0n1", "S1"), Opal: d, NVMe: fullNVMe(), PSIDKnown: true}
	p, err := PlanWipe(tgt, Policy{Method: PolicyPSIDRevert})
	if err != nil {
		t.Fatal(err)
	}
	h := Handles{Block: disk, Opal: sed, Security: sed}
	res, err := Execute(context.Background(), p, h, Credentials{PSID: psid}, Options{AllowDestructive: true})
	if err != nil {
		t.Fatal(err)
	}
	ev := strings.Join(res.Evidence, "\n")
	if !res.Verified || res.Method != MethodPSIDRevert || !strings.Contains(ev, "marker skipped: Opal reports a locked range") || !strings.Contains(ev, "factory=true") {
		t.Fatalf("result %+v", res)
	}

	// Unlocked drive: the marker is written and proven gone (noise now).
	sed = &fakeSED{disk: newDisk(t), psid: psid}
	res, err = Execute(context.Background(), p, Handles{Block: sed.disk, Opal: sed, Security: sed}, Credentials{PSID: psid}, Options{AllowDestructive: true})
	if err != nil || !strings.Contains(strings.Join(res.Evidence, "\n"), "marker gone, now non-uniform data") {
		t.Fatalf("err %v evidence %v", err, res.Evidence)
	}

	// Wrong PSID: NOT_AUTHORIZED is named, and no weaker method is tried
	// even when the plan has fallbacks.
	sed = &fakeSED{disk: newDisk(t), psid: psid}
	d, _ = opal.Discover(sed)
	p, err = PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S1"), Opal: d, NVMe: fullNVMe(), PSIDKnown: true}, Policy{Method: PolicyPSIDRevert, AllowWeakerFallback: true})
	if err != nil || len(p.Fallbacks) == 0 {
		t.Fatalf("plan %+v err %v", p, err)
	}
	ctrl := &fakeCtrl{disk: sed.disk}
	res, err = Execute(context.Background(), p, Handles{Block: sed.disk, Opal: sed, Security: sed, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{PSID: "WRONGWRONGWRONGWRONGWRONGWRONGWR"}, Options{AllowDestructive: true})
	if err == nil || !strings.Contains(err.Error(), "NOT_AUTHORIZED") || len(res.Attempts) != 1 || len(ctrl.cmds) != 0 {
		t.Fatalf("err %v attempts %+v ctrl cmds %d", err, res.Attempts, len(ctrl.cmds))
	}
}

func TestExecuteRefusesBootMedium(t *testing.T) {
	disk := newDisk(t)
	p := Plan{Disk: blockdev.Disk{Name: "sda", BootMedium: true}, Method: MethodFormatUserData}
	before := append([]byte(nil), disk.b[:4096]...)
	if _, err := Execute(context.Background(), p, Handles{Block: disk}, Credentials{}, Options{AllowDestructive: true}); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(before, disk.b[:4096]) {
		t.Error("boot medium was written")
	}
}

func TestMarkerRegions(t *testing.T) {
	m, err := planMarker(64<<20, 20, bytes.NewReader(bytes.Repeat([]byte{7}, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Regions) != 22 || m.Regions[0].Off != 0 || m.Regions[1].Off != 63<<20 {
		t.Fatalf("regions %+v", m.Regions[:2])
	}
	for _, r := range m.Regions[2:] {
		if r.Off%4096 != 0 || r.Off < 1<<20 || r.Off+r.Len > 63<<20 {
			t.Errorf("random region %+v outside (first MiB, last MiB) or unaligned", r)
		}
	}
	if _, err := planMarker(1<<20, 4, bytes.NewReader(make([]byte, 16))); err == nil {
		t.Error("a 1 MiB disk cannot hold first and last MiB markers")
	}
}

// The device library holds no mode policy: without the caller's grant it
// refuses every erase before a byte is written or a command sent.
func TestExecuteRefusesWithoutCapability(t *testing.T) {
	disk := newDisk(t)
	before := append([]byte(nil), disk.b...)
	ctrl := &fakeCtrl{disk: disk}
	for _, pol := range []string{PolicyFormat, PolicyCryptoErase} {
		p, err := PlanWipe(Target{Disk: nvmeDisk("nvme0n1", "S1"), OpalErr: noTCG, NVMe: fullNVMe()}, Policy{Method: pol})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Execute(context.Background(), p, Handles{Block: disk, Admin: ctrl, Namespace: testNamespace(t)}, Credentials{}, Options{})
		if err == nil || !strings.Contains(err.Error(), "did not grant AllowDestructive") || res.Verified || res.Method != MethodNone {
			t.Fatalf("%s: err = %v, result %+v", pol, err, res)
		}
	}
	if len(ctrl.cmds) != 0 {
		t.Errorf("%d admin commands sent without the capability", len(ctrl.cmds))
	}
	if !bytes.Equal(before, disk.b) {
		t.Error("disk written without the capability")
	}
}
