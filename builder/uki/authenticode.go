package uki

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sort"
)

// peLayout is what the Authenticode hash and the stub's measurements need
// of a PE32+ image.
type peLayout struct {
	checksumOff int // CheckSum field
	certDirOff  int // the Certificate Table data directory entry
	certSize    int // its Size (0: unsigned)
	headersSize int // SizeOfHeaders
	sections    []peSection
}

type peSection struct {
	Name                   string
	VirtualSize, VirtualVA uint32
	RawSize, RawOff        uint32
}

// parsePE reads the headers of a PE32+ image.
func parsePE(b []byte) (peLayout, error) {
	var l peLayout
	if len(b) < 0x40 || b[0] != 'M' || b[1] != 'Z' {
		return l, fmt.Errorf("not a PE image: no MZ header")
	}
	pe := int(binary.LittleEndian.Uint32(b[0x3c:]))
	if pe < 0x40 || pe+24 > len(b) || string(b[pe:pe+4]) != "PE\x00\x00" {
		return l, fmt.Errorf("not a PE image: bad PE header offset %#x", pe)
	}
	nsec := int(binary.LittleEndian.Uint16(b[pe+6:]))
	optSize := int(binary.LittleEndian.Uint16(b[pe+20:]))
	opt := pe + 24
	if opt+optSize > len(b) || optSize < 112+5*8 {
		return l, fmt.Errorf("PE optional header (%d bytes) truncated", optSize)
	}
	if m := binary.LittleEndian.Uint16(b[opt:]); m != 0x20b {
		return l, fmt.Errorf("PE optional header magic %#x: only PE32+ (0x20b) images", m)
	}
	l.checksumOff = opt + 64
	l.headersSize = int(binary.LittleEndian.Uint32(b[opt+60:]))
	// PE32+: the data directories start at 112; Certificate Table is the 5th.
	l.certDirOff = opt + 112 + 4*8
	l.certSize = int(binary.LittleEndian.Uint32(b[l.certDirOff+4:]))
	sh := opt + optSize
	if sh+nsec*40 > len(b) || l.headersSize > len(b) {
		return l, fmt.Errorf("PE section table truncated")
	}
	for i := 0; i < nsec; i++ {
		s := b[sh+40*i:]
		name := string(s[:8])
		for j := 0; j < 8; j++ {
			if s[j] == 0 {
				name = string(s[:j])
				break
			}
		}
		sec := peSection{Name: name, VirtualSize: binary.LittleEndian.Uint32(s[8:]), VirtualVA: binary.LittleEndian.Uint32(s[12:]),
			RawSize: binary.LittleEndian.Uint32(s[16:]), RawOff: binary.LittleEndian.Uint32(s[20:])}
		if int(sec.RawOff)+int(sec.RawSize) > len(b) {
			return l, fmt.Errorf("PE section %s: raw data [%#x, +%#x) beyond the file (%d bytes)", name, sec.RawOff, sec.RawSize, len(b))
		}
		l.sections = append(l.sections, sec)
	}
	return l, nil
}

// section is the named section's data as loaded (VirtualSize bytes, the
// part past the raw data zero).
func (l peLayout) section(b []byte, name string) ([]byte, bool) {
	for _, s := range l.sections {
		if s.Name == name {
			out := make([]byte, s.VirtualSize)
			n := s.RawSize
			if n > s.VirtualSize {
				n = s.VirtualSize
			}
			copy(out, b[s.RawOff:s.RawOff+n])
			return out, true
		}
	}
	return nil, false
}

// AuthenticodeSHA256 is the PE image hash firmware verifies a signature
// against and measures into PCR 4 (EDK2's HashPeImage): the file without
// the checksum, the certificate table entry and the attribute
// certificates, sections in file order.
func AuthenticodeSHA256(b []byte) ([]byte, error) {
	l, err := parsePE(b)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(b[:l.checksumOff])
	h.Write(b[l.checksumOff+4 : l.certDirOff])
	h.Write(b[l.certDirOff+8 : l.headersSize])
	hashed := l.headersSize
	secs := append([]peSection(nil), l.sections...)
	sort.SliceStable(secs, func(i, j int) bool { return secs[i].RawOff < secs[j].RawOff })
	for _, s := range secs {
		if s.RawSize == 0 {
			continue
		}
		h.Write(b[s.RawOff : s.RawOff+s.RawSize])
		hashed += int(s.RawSize)
	}
	if extra := len(b) - l.certSize - hashed; extra > 0 {
		h.Write(b[hashed : hashed+extra])
	}
	return sumOf(h), nil
}

func sumOf(h hash.Hash) []byte { return h.Sum(nil) }
