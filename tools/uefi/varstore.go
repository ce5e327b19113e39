package uefi

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Variable attributes.
const (
	AttrNonVolatile    = 0x1
	AttrBootService    = 0x2
	AttrRuntime        = 0x4
	AttrNVBSRT         = AttrNonVolatile | AttrBootService | AttrRuntime
	varStartID         = 0x55aa
	varAdded           = 0x3f // VAR_ADDED: the one live copy
	varDeleted         = 0x3d // VAR_ADDED & VAR_DELETED
	varStoreFormatted  = 0x5a
	varStoreHealthy    = 0xfe
	fvSignatureOffset  = 0x28
	fvHeaderLenOffset  = 0x30
	varStoreHeaderSize = 28
)

var (
	authVarStore   = MustGUID("aaf32c78-947b-439a-a180-2e144ec37792") // gEfiAuthenticatedVariableGuid
	normalVarStore = MustGUID("ddcf3616-3275-4164-98b6-fe85707ffe7d") // gEfiVariableGuid
)

// VarStore is an EDK2 variable store firmware volume (an OVMF_VARS file) in
// memory. It only appends and marks deleted, as the firmware's own variable
// driver does between reclaims; the firmware reclaims the space itself when
// the store fills.
type VarStore struct {
	b          []byte
	start, end int // variable area
	auth       bool
	free       int // offset of the first free byte (0xff) after the last variable
}

// Variable is one live variable of a store.
type Variable struct {
	Name  string
	GUID  GUID
	Attrs uint32
	Data  []byte
}

func (s *VarStore) hdrSize() int {
	if s.auth {
		return 60
	}
	return 32
}

// ParseVarStore reads an OVMF_VARS image; name is for errors.
func ParseVarStore(name string, b []byte) (*VarStore, error) {
	if len(b) < 0x48+varStoreHeaderSize || string(b[fvSignatureOffset:fvSignatureOffset+4]) != "_FVH" {
		return nil, fmt.Errorf("%s: not a firmware volume (no _FVH signature at %#x)", name, fvSignatureOffset)
	}
	hl := int(binary.LittleEndian.Uint16(b[fvHeaderLenOffset:]))
	if hl+varStoreHeaderSize > len(b) {
		return nil, fmt.Errorf("%s: firmware volume header length %d beyond the file", name, hl)
	}
	var g GUID
	copy(g[:], b[hl:])
	s := &VarStore{b: b}
	switch g {
	case authVarStore:
		s.auth = true
	case normalVarStore:
	default:
		return nil, fmt.Errorf("%s: offset %#x: not an EDK2 variable store", name, hl)
	}
	size := int(binary.LittleEndian.Uint32(b[hl+16:]))
	if b[hl+20] != varStoreFormatted || b[hl+21] != varStoreHealthy || hl+size > len(b) {
		return nil, fmt.Errorf("%s: variable store at %#x is not formatted and healthy (format %#x state %#x size %d)", name, hl, b[hl+20], b[hl+21], size)
	}
	s.start, s.end = align4(hl+varStoreHeaderSize), hl+size
	off := s.start
	for off+s.hdrSize() <= s.end && binary.LittleEndian.Uint16(b[off:]) == varStartID {
		ns, ds := s.sizes(off)
		next := align4(off + s.hdrSize() + ns + ds)
		if next > s.end {
			return nil, fmt.Errorf("%s: variable at %#x runs past the store's end", name, off)
		}
		off = next
	}
	s.free = off
	for i := off; i < s.end; i++ {
		if b[i] != 0xff {
			return nil, fmt.Errorf("%s: byte %#x after the last variable (%#x) is %#x, not free (0xff)", name, i, off, b[i])
		}
	}
	return s, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

func (s *VarStore) sizes(off int) (name, data int) {
	p := off + s.hdrSize() - 24
	return int(binary.LittleEndian.Uint32(s.b[p:])), int(binary.LittleEndian.Uint32(s.b[p+4:]))
}

// each calls f for every variable header offset in the store.
func (s *VarStore) each(f func(off int)) {
	for off := s.start; off < s.free; {
		ns, ds := s.sizes(off)
		f(off)
		off = align4(off + s.hdrSize() + ns + ds)
	}
}

func (s *VarStore) parse(off int) Variable {
	h := s.hdrSize()
	ns, ds := s.sizes(off)
	var v Variable
	v.Attrs = binary.LittleEndian.Uint32(s.b[off+4:])
	copy(v.GUID[:], s.b[off+h-16:off+h])
	u := s.b[off+h : off+h+ns]
	var r []rune
	for i := 0; i+1 < len(u); i += 2 {
		c := binary.LittleEndian.Uint16(u[i:])
		if c == 0 {
			break
		}
		r = append(r, rune(c))
	}
	v.Name = string(r)
	v.Data = append([]byte(nil), s.b[off+h+ns:off+h+ns+ds]...)
	return v
}

// Get is the live variable name of guid, if any.
func (s *VarStore) Get(name string, guid GUID) (Variable, bool) {
	var out Variable
	found := false
	s.each(func(off int) {
		if s.b[off+2] != varAdded {
			return
		}
		if v := s.parse(off); v.Name == name && v.GUID == guid {
			out, found = v, true
		}
	})
	return out, found
}

// Delete marks every live copy of the variable deleted.
func (s *VarStore) Delete(name string, guid GUID) {
	s.each(func(off int) {
		if s.b[off+2] != varAdded {
			return
		}
		if v := s.parse(off); v.Name == name && v.GUID == guid {
			s.b[off+2] = varDeleted
		}
	})
}

// Set replaces the variable (non-authenticated attributes only: Secure
// Boot's authenticated variables need a signed update through the
// firmware).
func (s *VarStore) Set(name string, guid GUID, attrs uint32, data []byte) error {
	if attrs&^uint32(AttrNVBSRT) != 0 || attrs&AttrNonVolatile == 0 {
		return fmt.Errorf("variable %s: attributes %#x: only non-volatile, boot-service and runtime variables can be written offline", name, attrs)
	}
	nameB := ucs2(name)
	h := s.hdrSize()
	need := align4(h + len(nameB) + len(data))
	if s.free+need > s.end {
		return fmt.Errorf("variable %s: %d bytes do not fit in the store's %d free bytes (boot the machine once: the firmware reclaims deleted variables)", name, need, s.end-s.free)
	}
	s.Delete(name, guid)
	var hdr bytes.Buffer
	_ = binary.Write(&hdr, binary.LittleEndian, uint16(varStartID))
	hdr.WriteByte(varAdded)
	hdr.WriteByte(0)
	_ = binary.Write(&hdr, binary.LittleEndian, attrs)
	if s.auth {
		hdr.Write(make([]byte, 8+16+4)) // MonotonicCount, TimeStamp, PubKeyIndex
	}
	_ = binary.Write(&hdr, binary.LittleEndian, uint32(len(nameB)))
	_ = binary.Write(&hdr, binary.LittleEndian, uint32(len(data)))
	hdr.Write(guid[:])
	off := s.free
	n := copy(s.b[off:], hdr.Bytes())
	n += copy(s.b[off+n:], nameB)
	copy(s.b[off+n:], data)
	s.free = align4(off + h + len(nameB) + len(data))
	return nil
}

// Bytes is the store image.
func (s *VarStore) Bytes() []byte { return s.b }

// ImageSecurityDatabase is the GUID of db and dbx.
var ImageSecurityDatabase = MustGUID("d719b2cb-3d3a-4596-a3bc-dad00e67656f")

// Append adds more to the data of a live variable, keeping its attributes
// and authentication fields (an authenticated variable such as db is
// checked when the OS writes it, not when the firmware reads its store: an
// offline append is what enrolling a certificate through a BMC amounts to).
func (s *VarStore) Append(name string, guid GUID, more []byte) error {
	old := -1
	s.each(func(off int) {
		if s.b[off+2] == varAdded {
			if v := s.parse(off); v.Name == name && v.GUID == guid {
				old = off
			}
		}
	})
	if old < 0 {
		return fmt.Errorf("variable %s does not exist: nothing to append to", name)
	}
	h := s.hdrSize()
	ns, ds := s.sizes(old)
	need := align4(h + ns + ds + len(more))
	if s.free+need > s.end {
		return fmt.Errorf("variable %s: %d bytes do not fit in the store's %d free bytes", name, need, s.end-s.free)
	}
	off := s.free
	copy(s.b[off:], s.b[old:old+h+ns+ds])
	binary.LittleEndian.PutUint32(s.b[off+h-20:], uint32(ds+len(more)))
	copy(s.b[off+h+ns+ds:], more)
	s.b[old+2] = varDeleted
	s.free = align4(off + h + ns + ds + len(more))
	return nil
}
