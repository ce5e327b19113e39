package zstd

import (
	"encoding/binary"
	"math/bits"
)

// hufMaxBits is the largest Huffman code length (RFC 8878 section 4.2.1).
// Tables are always built at this width so a lookup is a constant shift.
const hufMaxBits = 11

// hufTable maps the next 11 bits of a stream to symbol<<8 | codeLength.
type hufTable [1 << hufMaxBits]uint16

// readHuffmanTree parses a Huffman_Tree_Description (RFC 8878 section
// 4.2.1) and builds t. It returns the bytes consumed.
func (d *blockDecoder) readHuffmanTree(in []byte) (int, error) {
	if len(in) == 0 {
		return 0, corrupt("missing Huffman tree description")
	}
	var weights [256]uint8
	nw := 0
	hb := int(in[0])
	used := 0
	if hb >= 128 {
		// Direct representation: 4 bits per weight.
		nw = hb - 127
		used = 1 + (nw+1)/2
		if used > len(in) {
			return 0, corrupt("Huffman direct weights truncated")
		}
		for i := 0; i < nw; i++ {
			b := in[1+i/2]
			if i&1 == 0 {
				weights[i] = b >> 4
			} else {
				weights[i] = b & 15
			}
		}
	} else {
		used = 1 + hb
		if used > len(in) || hb == 0 {
			return 0, corrupt("Huffman FSE weights truncated")
		}
		var err error
		if nw, err = fseHufWeights(in[1:used], &weights); err != nil {
			return 0, err
		}
	}
	if err := d.buildHuf(&weights, nw); err != nil {
		return 0, err
	}
	d.hasHuf = true
	return used, nil
}

// fseHufWeights decodes FSE-compressed weights (section 4.2.1.2): two
// interleaved states sharing one backward bitstream. It returns how many
// weights it wrote.
func fseHufWeights(src []byte, weights *[256]uint8) (int, error) {
	nw := 0
	var norm [256]int16
	log, nsym, n, err := readNCount(src, norm[:], 255, 6)
	if err != nil {
		return 0, wrapCorrupt("Huffman weights table", err)
	}
	var tab [64]fseEntry
	if err := buildFSE(norm[:nsym], log, tab[:1<<log]); err != nil {
		return 0, wrapCorrupt("Huffman weights table", err)
	}
	var br bitReader
	if err := br.init(src[n:]); err != nil {
		return 0, wrapCorrupt("Huffman weights stream", err)
	}
	s1 := br.getBits(log)
	s2 := br.getBits(log)
	for {
		if nw >= 254 {
			return 0, corrupt("too many Huffman weights")
		}
		e := tab[s1]
		weights[nw] = e.sym
		nw++
		s1 = uint64(e.newState) + br.getBits(e.nbBits)
		br.reload()
		if br.overflowed() {
			weights[nw] = tab[s2].sym
			nw++
			break
		}
		e = tab[s2]
		weights[nw] = e.sym
		nw++
		s2 = uint64(e.newState) + br.getBits(e.nbBits)
		br.reload()
		if br.overflowed() {
			weights[nw] = tab[s1].sym
			nw++
			break
		}
	}
	return nw, nil
}

// buildHuf completes the nw weights with the implied last one and builds
// d.huf from them.
func (d *blockDecoder) buildHuf(weights *[256]uint8, nw int) error {
	if nw > 255 {
		return corrupt("too many Huffman weights")
	}
	// The last symbol's weight is implied: it completes the sum to the
	// next power of two (section 4.2.1.3).
	total := uint32(0)
	for _, w := range weights[:nw] {
		if w > hufMaxBits {
			return corruptf("Huffman weight %d too large", w)
		}
		if w > 0 {
			total += 1 << (w - 1)
		}
	}
	if total == 0 {
		return corrupt("Huffman weights all zero")
	}
	maxBits := bits.Len32(total)
	if maxBits > hufMaxBits {
		return corrupt("Huffman code length exceeds 11 bits")
	}
	rest := uint32(1)<<maxBits - total
	if rest&(rest-1) != 0 {
		return corrupt("Huffman weights do not complete a power of two")
	}
	weights[nw] = uint8(bits.Len32(rest))
	nw++

	// Assign codes: lowest weight first, by symbol within a weight; each
	// symbol covers 2^(w-1) cells of a maxBits table, widened to 11 bits.
	var rankCount [hufMaxBits + 2]int
	for _, w := range weights[:nw] {
		rankCount[w]++
	}
	var rankStart [hufMaxBits + 2]int
	pos := 0
	for w := 1; w <= maxBits; w++ {
		rankStart[w] = pos
		pos += rankCount[w] << (w - 1 + hufMaxBits - maxBits)
	}
	if pos != 1<<hufMaxBits {
		return corrupt("Huffman table incomplete")
	}
	t := &d.huf
	for s, w := range weights[:nw] {
		if w == 0 {
			continue
		}
		n := 1 << (int(w) - 1 + hufMaxBits - maxBits)
		e := uint16(s)<<8 | uint16(maxBits+1-int(w))
		p := rankStart[w]
		for i := p; i < p+n; i++ {
			t[i] = e
		}
		rankStart[w] = p + n
	}
	return nil
}

// decodeHuf1 decodes a single Huffman stream filling dst exactly.
func decodeHuf1(t *hufTable, dst, src []byte) error {
	var br bitReader
	if err := br.init(src); err != nil {
		return err
	}
	o := 0
	for br.ptr >= 8 && o+4 <= len(dst) {
		br.reload()
		e := t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o] = uint8(e >> 8)
		e = t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o+1] = uint8(e >> 8)
		e = t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o+2] = uint8(e >> 8)
		e = t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o+3] = uint8(e >> 8)
		o += 4
	}
	for ; o < len(dst); o++ {
		br.reload()
		e := t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o] = uint8(e >> 8)
	}
	if !br.finished() {
		return corrupt("Huffman stream not consumed exactly")
	}
	return nil
}

// decodeHuf4 decodes the 4-stream layout (RFC 8878 section 3.1.1.3.1.6): a
// 6-byte jump table, then streams regenerating (n+3)/4 bytes each except
// the last. The streams are interleaved so their lookups overlap.
func decodeHuf4(t *hufTable, dst, src []byte) error {
	if len(src) < 10 {
		return corrupt("4-stream Huffman literals too short")
	}
	l1 := int(binary.LittleEndian.Uint16(src[0:]))
	l2 := int(binary.LittleEndian.Uint16(src[2:]))
	l3 := int(binary.LittleEndian.Uint16(src[4:]))
	src = src[6:]
	l4 := len(src) - l1 - l2 - l3
	if l4 < 1 {
		return corrupt("Huffman jump table exceeds literals size")
	}
	seg := (len(dst) + 3) / 4
	if 3*seg > len(dst) {
		return corrupt("too few literals for 4 Huffman streams")
	}
	var b1, b2, b3, b4 bitReader
	if err := b1.init(src[:l1]); err != nil {
		return err
	}
	if err := b2.init(src[l1 : l1+l2]); err != nil {
		return err
	}
	if err := b3.init(src[l1+l2 : l1+l2+l3]); err != nil {
		return err
	}
	if err := b4.init(src[l1+l2+l3:]); err != nil {
		return err
	}
	d1 := dst[0:seg]
	d2 := dst[seg : 2*seg]
	d3 := dst[2*seg : 3*seg]
	d4 := dst[3*seg:]
	o := 0
	// Fast path: every stream has a full 64-bit refill (at least 57 bits,
	// five 11-bit codes) and at least five symbols left (stream 4 is the
	// shortest). The bit containers live in locals, not in b1..b4 (whose
	// addresses are taken below), so they can stay in registers.
	in1, in2, in3, in4 := b1.in, b2.in, b3.in, b4.in
	p1, p2, p3, p4 := b1.ptr, b2.ptr, b3.ptr, b4.ptr
	v1, v2, v3, v4 := b1.value, b2.value, b3.value, b4.value
	c1, c2, c3, c4 := b1.consumed, b2.consumed, b3.consumed, b4.consumed
	for p1 >= 8 && p2 >= 8 && p3 >= 8 && p4 >= 8 && o+5 <= len(d4) {
		p1 -= int(c1 >> 3)
		c1 &= 7
		v1 = binary.LittleEndian.Uint64(in1[p1:])
		p2 -= int(c2 >> 3)
		c2 &= 7
		v2 = binary.LittleEndian.Uint64(in2[p2:])
		p3 -= int(c3 >> 3)
		c3 &= 7
		v3 = binary.LittleEndian.Uint64(in3[p3:])
		p4 -= int(c4 >> 3)
		c4 &= 7
		v4 = binary.LittleEndian.Uint64(in4[p4:])
		// Reslicing once per round lets the compiler drop the
		// per-byte bounds checks below.
		w1, w2, w3, w4 := d1[o:o+5], d2[o:o+5], d3[o:o+5], d4[o:o+5]
		for k := 0; k < 5; k++ {
			e1 := t[(v1<<(c1&63))>>(64-hufMaxBits)]
			e2 := t[(v2<<(c2&63))>>(64-hufMaxBits)]
			e3 := t[(v3<<(c3&63))>>(64-hufMaxBits)]
			e4 := t[(v4<<(c4&63))>>(64-hufMaxBits)]
			c1 += uint(e1 & 0xff)
			c2 += uint(e2 & 0xff)
			c3 += uint(e3 & 0xff)
			c4 += uint(e4 & 0xff)
			w1[k] = uint8(e1 >> 8)
			w2[k] = uint8(e2 >> 8)
			w3[k] = uint8(e3 >> 8)
			w4[k] = uint8(e4 >> 8)
		}
		o += 5
	}
	b1.ptr, b2.ptr, b3.ptr, b4.ptr = p1, p2, p3, p4
	b1.value, b2.value, b3.value, b4.value = v1, v2, v3, v4
	b1.consumed, b2.consumed, b3.consumed, b4.consumed = c1, c2, c3, c4
	if err := hufTail(t, &b1, d1, o); err != nil {
		return err
	}
	if err := hufTail(t, &b2, d2, o); err != nil {
		return err
	}
	if err := hufTail(t, &b3, d3, o); err != nil {
		return err
	}
	return hufTail(t, &b4, d4, o)
}

func hufTail(t *hufTable, br *bitReader, dst []byte, o int) error {
	for ; o < len(dst); o++ {
		br.reload()
		e := t[(br.value<<(br.consumed&63))>>(64-hufMaxBits)]
		br.consumed += uint(e & 0xff)
		dst[o] = uint8(e >> 8)
	}
	if !br.finished() {
		return corrupt("Huffman stream not consumed exactly")
	}
	return nil
}
