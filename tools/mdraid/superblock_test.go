package mdraid

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/testenv"
)

// encode lays out s as md_p.h's struct mdp_superblock_1 and sets its
// checksum: the test side of Parse, checked against mdadm --examine.
func encode(s *Superblock) []byte {
	b := make([]byte, blockSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	le.PutUint32(b[4:], 1)
	le.PutUint32(b[8:], s.FeatureMap)
	copy(b[16:32], s.ArrayUUID[:])
	copy(b[32:64], s.Name)
	le.PutUint64(b[64:], s.CTime)
	le.PutUint32(b[72:], uint32(s.Level))
	le.PutUint32(b[76:], s.Layout)
	le.PutUint64(b[80:], s.Size)
	le.PutUint32(b[88:], s.ChunkSectors)
	le.PutUint32(b[92:], s.RaidDisks)
	le.PutUint64(b[128:], s.DataOffset)
	le.PutUint64(b[136:], s.DataSize)
	le.PutUint64(b[144:], s.SuperOffset)
	le.PutUint32(b[160:], s.DevNumber)
	copy(b[168:184], s.DeviceUUID[:])
	le.PutUint64(b[192:], s.CTime) // utime
	le.PutUint64(b[200:], s.Events)
	le.PutUint64(b[208:], s.ResyncOffset)
	le.PutUint32(b[220:], uint32(len(s.Roles)))
	for i, r := range s.Roles {
		le.PutUint16(b[headerSize+2*i:], r)
	}
	le.PutUint32(b[216:], Checksum(b))
	return b
}

const memberSize = 64 << 20

// member writes a sparse member file of a two-disk RAID1 created with
// metadata 1.0, in slot dev.
func member(t *testing.T, dir string, dev uint32) (string, *Superblock) {
	t.Helper()
	off := Offset1_0(memberSize)
	s := &Superblock{
		Version: "1.0", ArrayUUID: [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		Name: "any:cure-os", CTime: 1_700_000_000, Level: 1, Size: uint64(off / 512), RaidDisks: 2,
		DataSize: uint64(off / 512), SuperOffset: uint64(off / 512), DevNumber: dev,
		DeviceUUID: [16]byte{byte(dev + 1), 0xaa}, Events: 17, ResyncOffset: ^uint64(0), Roles: []uint16{0, 1},
	}
	p := filepath.Join(dir, "member"+string(rune('0'+dev)))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(memberSize); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(encode(s), off); err != nil {
		t.Fatal(err)
	}
	return p, s
}

func TestExamineRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p0, want := member(t, dir, 0)
	p1, _ := member(t, dir, 1)
	got, err := Examine(p0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Examine = %+v\nwant %+v", got, want)
	}
	if got.Role() != 0 || !got.InSync() {
		t.Errorf("role %d in sync %v, want slot 0 in sync", got.Role(), got.InSync())
	}
	s1, err := Examine(p1)
	if err != nil {
		t.Fatal(err)
	}
	uuid, err := CheckMembers("raid1", []string{p0, p1}, []*Superblock{got, s1})
	if err != nil || uuid != "deadbeef:01020304:05060708:090a0b0c" {
		t.Fatalf("CheckMembers = %q, %v", uuid, err)
	}
}

// TestMdadmExamine: mdadm itself reads the layout this package reads, so
// the offsets and the checksum are md's, not only this package's idea.
func TestMdadmExamine(t *testing.T) {
	mdadm, err := exec.LookPath("mdadm")
	if err != nil {
		testenv.Missing(t, "mdadm (Debian package mdadm: scripts/install-deps.sh image)")
		return
	}
	p0, _ := member(t, t.TempDir(), 1)
	out, err := exec.Command(mdadm, "--examine", p0).CombinedOutput()
	if err != nil {
		t.Fatalf("mdadm --examine: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Version : 1.0", "Array UUID : deadbeef:01020304:05060708:090a0b0c", "Name : any:cure-os",
		"Raid Level : raid1", "Raid Devices : 2", "Super Offset : 131056 sectors", "State : clean", "Events : 17",
		"Device Role : Active device 1", "Array State : AA", "Checksum :",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("mdadm --examine lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), "- correct") {
		t.Errorf("mdadm finds the checksum wrong:\n%s", out)
	}
}

func TestCheckMembersRefuses(t *testing.T) {
	dir := t.TempDir()
	_, a := member(t, dir, 0)
	_, b := member(t, dir, 1)
	other := *b
	other.ArrayUUID[0] = 0
	same := *b
	same.DevNumber = 0
	ten := *b
	ten.Level, ten.Version, ten.DataOffset = 10, "1.2", 2048
	for name, c := range map[string]struct {
		sbs  []*Superblock
		want string
	}{
		"other array":  {[]*Superblock{a, &other}, "is in deadbeef"},
		"same slot":    {[]*Superblock{a, &same}, "slot 0, also"},
		"level":        {[]*Superblock{a, &ten}, "level 10, want 1"},
		"metadata 1.2": {[]*Superblock{a, &ten}, "metadata 1.2, want 1.0"},
		"data offset":  {[]*Superblock{a, &ten}, "data offset 2048 sectors"},
		"missing a sb": {[]*Superblock{a}, "1 superblocks for 2 members"},
	} {
		if _, err := CheckMembers("raid1", []string{"m0", "m1"}, c.sbs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestReadRefuses(t *testing.T) {
	_, s := member(t, t.TempDir(), 0)
	b := encode(s)
	b[100]++ // a field the checksum covers
	if _, err := Parse(b, "1.0"); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("corrupt: %v", err)
	}
	if _, err := Read(bytes.NewReader(make([]byte, 1<<20)), 1<<20); err == nil || !strings.Contains(err.Error(), "no md superblock") {
		t.Errorf("zeros: %v", err)
	}
	b = encode(s)
	binary.LittleEndian.PutUint32(b[220:], 5000)
	if _, err := Parse(b, "1.0"); err == nil || !strings.Contains(err.Error(), "max_dev 5000") {
		t.Errorf("max_dev: %v", err)
	}
}

func TestCreateArgs(t *testing.T) {
	got, err := CreateArgs("/dev/md/cure-os", "cure-os", "raid10", []string{"/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1", "/dev/nvme3n1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "--create /dev/md/cure-os --run --metadata=1.0 --homehost=any --name=cure-os --level=raid10 --raid-devices=4 --layout=n2 --assume-clean /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1"
	if strings.Join(got, " ") != want {
		t.Errorf("CreateArgs = %s\nwant %s", strings.Join(got, " "), want)
	}
	if _, err := CreateArgs("/dev/md/x", "x", "raid5", nil, false); err == nil {
		t.Error("raid5 accepted")
	}
}

func FuzzParse(f *testing.F) {
	_, s := member(&testing.T{}, f.TempDir(), 0)
	f.Add(encode(s))
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sb, err := Parse(b, "1.0"); err == nil {
			_ = sb.Role()
		}
		_, _ = Read(bytes.NewReader(b), int64(len(b)))
	})
}
