package zstd

import (
	"encoding/binary"
	"math/bits"
)

// XXH64 (seed 0) for Content_Checksum (RFC 8878 section 3.1.1). Written here
// so the package has no dependency beyond the standard library.

const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
	xxPrime3 uint64 = 1609587929392839161
	xxPrime4 uint64 = 9650029242287828579
	xxPrime5 uint64 = 2870177450012600261
)

type xxh64 struct {
	v1, v2, v3, v4 uint64
	total          uint64
	mem            [32]byte
	n              int // bytes buffered in mem
}

func (x *xxh64) reset() {
	// Wrapping arithmetic on the primes, as the algorithm specifies;
	// variables keep the compiler from rejecting constant overflow.
	p1, p2 := xxPrime1, xxPrime2
	x.v1 = p1 + p2
	x.v2 = p2
	x.v3 = 0
	x.v4 = -p1
	x.total = 0
	x.n = 0
}

func xxRound(acc, in uint64) uint64 {
	acc += in * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

func xxMerge(acc, v uint64) uint64 {
	acc ^= xxRound(0, v)
	return acc*xxPrime1 + xxPrime4
}

func (x *xxh64) write(b []byte) {
	x.total += uint64(len(b))
	if x.n > 0 {
		c := copy(x.mem[x.n:], b)
		x.n += c
		b = b[c:]
		if x.n < 32 {
			return
		}
		x.stripes(x.mem[:])
		x.n = 0
	}
	if len(b) >= 32 {
		full := len(b) &^ 31
		x.stripes(b[:full])
		b = b[full:]
	}
	x.n = copy(x.mem[:], b)
}

// stripes consumes a multiple of 32 bytes; locals keep the four lanes in
// registers, which is most of the speed of this loop.
func (x *xxh64) stripes(b []byte) {
	v1, v2, v3, v4 := x.v1, x.v2, x.v3, x.v4
	for len(b) >= 32 {
		v1 = xxRound(v1, binary.LittleEndian.Uint64(b[0:8]))
		v2 = xxRound(v2, binary.LittleEndian.Uint64(b[8:16]))
		v3 = xxRound(v3, binary.LittleEndian.Uint64(b[16:24]))
		v4 = xxRound(v4, binary.LittleEndian.Uint64(b[24:32]))
		b = b[32:]
	}
	x.v1, x.v2, x.v3, x.v4 = v1, v2, v3, v4
}

func (x *xxh64) sum64() uint64 {
	var h uint64
	if x.total >= 32 {
		h = bits.RotateLeft64(x.v1, 1) + bits.RotateLeft64(x.v2, 7) +
			bits.RotateLeft64(x.v3, 12) + bits.RotateLeft64(x.v4, 18)
		h = xxMerge(h, x.v1)
		h = xxMerge(h, x.v2)
		h = xxMerge(h, x.v3)
		h = xxMerge(h, x.v4)
	} else {
		h = xxPrime5
	}
	h += x.total
	b := x.mem[:x.n]
	for ; len(b) >= 8; b = b[8:] {
		h ^= xxRound(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}
