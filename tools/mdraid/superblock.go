// Package mdraid reads Linux md version-1 superblocks (the kernel's
// include/uapi/linux/raid/md_p.h, struct mdp_superblock_1) from array
// members, so the runner can check what mdadm created without parsing
// mdadm's text, and builds the mdadm command lines it runs. Metadata 1.0
// puts the superblock at the end of the member, 1.1 at its start, 1.2 4 KiB
// in; 1.0 is what the runner creates for a bootable RAID1, since every
// member then starts with the array's data and reads as a plain disk.
package mdraid

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Magic is MD_SB_MAGIC, the first 4 bytes of every md superblock.
const Magic = 0xa92b4efc

const (
	headerSize = 256  // sizeof(struct mdp_superblock_1) before dev_roles
	blockSize  = 4096 // the kernel reads and writes the superblock in 4 KiB
	// maxDev is what fits a 4 KiB superblock: (4096-256)/2 roles.
	maxDev = (blockSize - headerSize) / 2
)

// Special dev_roles values (md_p.h MD_DISK_ROLE_*).
const (
	RoleSpare   = 0xffff
	RoleFaulty  = 0xfffe
	RoleJournal = 0xfffd
)

// ErrNoSuperblock says a device carries no md v1 superblock where the
// asked metadata version keeps it.
var ErrNoSuperblock = errors.New("no md superblock")

// Superblock is what the runner checks of one member's superblock.
type Superblock struct {
	Version      string // "1.0", "1.1" or "1.2": where it was found
	FeatureMap   uint32
	ArrayUUID    [16]byte
	Name         string // set_name: "host:name" as mdadm writes it
	CTime        uint64 // low 40 bits seconds
	Level        int32  // 1, 10; -1 linear, 0 raid0
	Layout       uint32
	Size         uint64 // sectors of each member the array uses
	ChunkSectors uint32
	RaidDisks    uint32
	DataOffset   uint64 // sectors
	DataSize     uint64 // sectors
	SuperOffset  uint64 // sectors: where this superblock is
	DevNumber    uint32
	DeviceUUID   [16]byte
	Events       uint64
	ResyncOffset uint64 // sectors; ^0 when the array is in sync
	Roles        []uint16
}

// Role is this member's slot in the array (dev_roles[dev_number]), or one
// of RoleSpare, RoleFaulty, RoleJournal.
func (s *Superblock) Role() uint16 {
	if int(s.DevNumber) >= len(s.Roles) {
		return RoleSpare
	}
	return s.Roles[s.DevNumber]
}

// InSync reports whether the superblock says the array needs no resync.
func (s *Superblock) InSync() bool { return s.ResyncOffset == ^uint64(0) }

// UUID renders the array UUID as mdadm does: 8:8:8:8 hex digits.
func UUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + ":" + h[8:16] + ":" + h[16:24] + ":" + h[24:32]
}

// Parse decodes a superblock block (at least 256 bytes plus the roles);
// version names where it was found. It checks the magic, the major version,
// the roles' bound and the checksum.
func Parse(b []byte, version string) (*Superblock, error) {
	if len(b) < headerSize {
		return nil, fmt.Errorf("md superblock: %d bytes, need at least %d", len(b), headerSize)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != Magic {
		return nil, fmt.Errorf("%w (magic %#08x, want %#08x)", ErrNoSuperblock, m, uint32(Magic))
	}
	if v := le.Uint32(b[4:]); v != 1 {
		return nil, fmt.Errorf("md superblock: major version %d, only version 1 is read", v)
	}
	n := le.Uint32(b[220:])
	if n > maxDev || len(b) < headerSize+2*int(n) {
		return nil, fmt.Errorf("md superblock: max_dev %d does not fit %d bytes", n, len(b))
	}
	if got, want := le.Uint32(b[216:]), Checksum(b); got != want {
		return nil, fmt.Errorf("md superblock: checksum %#08x, computed %#08x", got, want)
	}
	s := &Superblock{
		Version:    version,
		FeatureMap: le.Uint32(b[8:]),
		Name:       strings.TrimRight(string(b[32:64]), "\x00"),
		CTime:      le.Uint64(b[64:]), Level: int32(le.Uint32(b[72:])), Layout: le.Uint32(b[76:]),
		Size: le.Uint64(b[80:]), ChunkSectors: le.Uint32(b[88:]), RaidDisks: le.Uint32(b[92:]),
		DataOffset: le.Uint64(b[128:]), DataSize: le.Uint64(b[136:]), SuperOffset: le.Uint64(b[144:]),
		DevNumber: le.Uint32(b[160:]), Events: le.Uint64(b[200:]), ResyncOffset: le.Uint64(b[208:]),
	}
	copy(s.ArrayUUID[:], b[16:32])
	copy(s.DeviceUUID[:], b[168:184])
	for i := range int(n) {
		s.Roles = append(s.Roles, le.Uint16(b[headerSize+2*i:]))
	}
	return s, nil
}

// Checksum is calc_sb_1_csum: the little-endian 32-bit words of the
// header and roles summed into 64 bits with sb_csum taken as zero, then
// the carry folded once into the low 32 bits.
func Checksum(b []byte) uint32 {
	le := binary.LittleEndian
	size := headerSize + 2*int(le.Uint32(b[220:]))
	var sum uint64
	i := 0
	for ; size-i >= 4; i += 4 {
		if i == 216 {
			continue // sb_csum itself
		}
		sum += uint64(le.Uint32(b[i:]))
	}
	if size-i == 2 {
		sum += uint64(le.Uint16(b[i:]))
	}
	return uint32(sum&0xffffffff + sum>>32)
}

// Offset1_0 is where metadata 1.0 keeps the superblock on a member of
// size bytes: 8 KiB from the end, rounded down to 4 KiB (super1.c).
func Offset1_0(size int64) int64 {
	sectors := size / 512
	return ((sectors - 16) &^ 7) * 512
}

// Read looks for a version-1 superblock in r (a member of size bytes) at
// the 1.0, 1.1 and 1.2 places, in that order.
func Read(r io.ReaderAt, size int64) (*Superblock, error) {
	places := []struct {
		version string
		off     int64
	}{{"1.0", Offset1_0(size)}, {"1.1", 0}, {"1.2", 4096}}
	var errs []string
	for _, p := range places {
		if p.off < 0 || p.off+blockSize > size {
			continue
		}
		b := make([]byte, blockSize)
		if _, err := r.ReadAt(b, p.off); err != nil {
			return nil, fmt.Errorf("reading md superblock %s at byte %d: %w", p.version, p.off, err)
		}
		s, err := Parse(b, p.version)
		if err == nil {
			if s.SuperOffset*512 != uint64(p.off) {
				return nil, fmt.Errorf("md superblock %s at byte %d says it is at sector %d", p.version, p.off, s.SuperOffset)
			}
			return s, nil
		}
		if !errors.Is(err, ErrNoSuperblock) {
			return nil, fmt.Errorf("md superblock %s at byte %d: %w", p.version, p.off, err)
		}
		errs = append(errs, p.version)
	}
	return nil, fmt.Errorf("%w at metadata %s places (device of %d bytes)", ErrNoSuperblock, strings.Join(errs, ", "), size)
}

// Examine reads the superblock of the member at path (a block device or
// a file).
func Examine(path string) (*Superblock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("examine %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("examine %s: size: %w", path, err)
	}
	s, err := Read(f, size)
	if err != nil {
		return nil, fmt.Errorf("examine %s: %w", path, err)
	}
	return s, nil
}
