package zstd

import (
	"encoding/binary"
	"math/bits"
)

// bitReader reads a backward bitstream (RFC 8878 section 4.1): the stream is
// written forward and read from its last byte, whose highest set bit is a
// padding marker. value holds the 8 bytes in[ptr:ptr+8] little-endian and
// consumed counts bits already taken from the top of value, so refilling is
// one 64-bit load.
type bitReader struct {
	in       []byte
	ptr      int
	value    uint64
	consumed uint
}

func (b *bitReader) init(in []byte) error {
	if len(in) == 0 {
		return corrupt("empty bitstream")
	}
	last := in[len(in)-1]
	if last == 0 {
		// Section 4.1: the final byte always carries the end marker bit.
		return corrupt("bitstream final byte is zero (no end marker)")
	}
	b.in = in
	if len(in) >= 8 {
		b.ptr = len(in) - 8
		b.value = binary.LittleEndian.Uint64(in[b.ptr:])
		b.consumed = 0
	} else {
		// Short stream: the missing high bytes of value are zero and
		// count as already consumed.
		b.ptr = 0
		var v uint64
		for i, c := range in {
			v |= uint64(c) << (8 * uint(i))
		}
		b.value = v
		b.consumed = uint(8 * (8 - len(in)))
	}
	b.consumed += uint(bits.LeadingZeros8(last)) + 1
	return nil
}

// getBits returns the next n (0..56) bits. Past the start of the stream it
// returns garbage; callers detect that via overflowed/finished.
func (b *bitReader) getBits(n uint8) uint64 {
	v := (b.value << (b.consumed & 63)) >> 1 >> ((63 - uint(n)) & 63)
	b.consumed += uint(n)
	return v
}

// reload refills value so that at least 57 bits are available, unless the
// start of the stream is near.
func (b *bitReader) reload() {
	if b.consumed > 64 {
		return
	}
	if b.ptr >= 8 {
		b.ptr -= int(b.consumed >> 3)
		b.consumed &= 7
		b.value = binary.LittleEndian.Uint64(b.in[b.ptr:])
		return
	}
	if b.ptr == 0 {
		return
	}
	nb := int(b.consumed >> 3)
	if nb > b.ptr {
		nb = b.ptr
	}
	b.ptr -= nb
	b.consumed -= uint(nb) << 3
	b.value = binary.LittleEndian.Uint64(b.in[b.ptr:])
}

// finished reports whether every bit was consumed exactly.
func (b *bitReader) finished() bool { return b.ptr == 0 && b.consumed == 64 }

// overflowed reports whether more bits were read than the stream holds.
func (b *bitReader) overflowed() bool { return b.ptr == 0 && b.consumed > 64 }

// fwdBitReader reads the little-endian forward bitstream used by FSE table
// descriptions (RFC 8878 section 4.1.1). Reads past the end yield zeros; the
// caller checks pos against the input length afterwards.
type fwdBitReader struct {
	in  []byte
	pos uint // in bits
}

func (f *fwdBitReader) peek() uint64 {
	i := int(f.pos >> 3)
	var v uint64
	if i+8 <= len(f.in) {
		v = binary.LittleEndian.Uint64(f.in[i:])
	} else {
		for k := 0; i+k < len(f.in) && k < 8; k++ {
			v |= uint64(f.in[i+k]) << (8 * uint(k))
		}
	}
	return v >> (f.pos & 7)
}

func (f *fwdBitReader) skip(n uint) { f.pos += n }
