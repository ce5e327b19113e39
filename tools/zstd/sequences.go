package zstd

import "encoding/binary"

// decodeCompressed decodes a Compressed_Block (RFC 8878 section 3.1.1.3)
// from src straight into the history ring at r.pos and returns the number
// of bytes produced. r.ensureSpace(r.blockMax) must have been called.
func (r *Reader) decodeCompressed(src []byte) (int, error) {
	d := &r.dec
	lits, n, err := d.decodeLiterals(src, r.blockMax)
	if err != nil {
		return 0, err
	}
	src = src[n:]

	// Sequences_Section_Header (section 3.1.1.3.2.1).
	if len(src) == 0 {
		return 0, corrupt("missing sequences section")
	}
	var nbSeq, hl int
	switch b0 := int(src[0]); {
	case b0 == 0:
		if len(src) != 1 {
			return 0, corrupt("data after empty sequences section")
		}
		return r.execSequences(lits, nil, 0)
	case b0 < 128:
		nbSeq, hl = b0, 1
	case b0 < 255:
		if len(src) < 2 {
			return 0, corrupt("sequences header truncated")
		}
		nbSeq, hl = (b0-128)<<8|int(src[1]), 2
	default:
		if len(src) < 3 {
			return 0, corrupt("sequences header truncated")
		}
		nbSeq, hl = int(src[1])|int(src[2])<<8+0x7f00, 3
	}
	if len(src) < hl+1 {
		return 0, corrupt("symbol compression modes missing")
	}
	modes := src[hl]
	if modes&3 != 0 {
		return 0, corrupt("reserved bits set in symbol compression modes")
	}
	src = src[hl+1:]
	for _, k := range [3]seqKind{kindLL, kindOF, kindML} {
		var mode byte
		switch k {
		case kindLL:
			mode = modes >> 6
		case kindOF:
			mode = (modes >> 4) & 3
		case kindML:
			fallthrough
		default:
			mode = (modes >> 2) & 3
		}
		n, err := d.readSeqTable(k, mode, src)
		if err != nil {
			return 0, err
		}
		src = src[n:]
	}
	return r.execSequences(lits, src, nbSeq)
}

// execSequences decodes nbSeq sequences from the backward bitstream src
// (section 3.1.1.3.2.2) and executes each at once (section 3.1.1.4), so no
// sequence buffer is needed. Output goes to r.buf[r.pos:]; match sources
// may lie in the older lap of the ring, below r.wrapAt.
func (r *Reader) execSequences(lits, src []byte, nbSeq int) (int, error) {
	buf := r.buf
	start := r.pos
	cur := start
	limit := start + r.blockMax
	if limit+wildSlack > len(buf) {
		return 0, corrupt("internal: block does not fit in window buffer")
	}
	litPos := 0
	if nbSeq > 0 {
		var err error
		if cur, litPos, err = r.runSequences(lits, src, nbSeq, limit); err != nil {
			return 0, err
		}
	}
	rest := len(lits) - litPos
	if rest > limit-cur {
		return 0, corruptf("block output exceeds maximum block size %d", r.blockMax)
	}
	copy(buf[cur:], lits[litPos:])
	cur += rest
	return cur - start, nil
}

// runSequences is execSequences' loop over the sequences; it returns where
// the output and the literals stand after the last one.
func (r *Reader) runSequences(lits, src []byte, nbSeq, limit int) (cur, litPos int, err error) {
	buf := r.buf
	start := r.pos
	cur = start
	window := r.window
	// hist is how much frame history precedes this block, capped at the
	// window; offsets beyond hist+(cur-start) are invalid.
	hist := r.window
	if r.frameOut < uint64(hist) {
		hist = int(r.frameOut)
	}
	d := &r.dec
	var br bitReader
	if err := br.init(src); err != nil {
		return 0, 0, wrapCorrupt("sequences bitstream", err)
	}
	llT, mlT, ofT := d.ll.entries, d.ml.entries, d.of.entries
	llS := br.getBits(d.ll.log)
	ofS := br.getBits(d.of.log)
	mlS := br.getBits(d.ml.log)
	reps := d.reps
	// The bit reader lives in locals inside the loop so that the
	// compiler keeps it in registers.
	bIn, bPtr, bVal, bCons := br.in, br.ptr, br.value, br.consumed
	for i := 0; i < nbSeq; i++ {
		lle, mle, ofe := llT[llS&511], mlT[mlS&511], ofT[ofS&511]
		if bPtr >= 8 {
			bPtr -= int(bCons >> 3)
			bCons &= 7
			bVal = binary.LittleEndian.Uint64(bIn[bPtr:])
		} else {
			bPtr, bVal, bCons = slowReload(bIn, bPtr, bVal, bCons)
		}
		// At least 57 bits are available now (unless the stream
		// start is near), enough for any two of the extra-bit fields.
		ofb, mlb, llb := uint(ofe.addBits), uint(mle.addBits), uint(lle.addBits)
		ofv := int(ofe.baseline) + int((bVal<<(bCons&63))>>1>>((63-ofb)&63))
		bCons += ofb
		ml := int(mle.baseline) + int((bVal<<(bCons&63))>>1>>((63-mlb)&63))
		bCons += mlb
		extra := ofb + mlb + llb
		if extra > 56 {
			bPtr, bVal, bCons = slowReload(bIn, bPtr, bVal, bCons)
		}
		ll := int(lle.baseline) + int((bVal<<(bCons&63))>>1>>((63-llb)&63))
		bCons += llb
		off := repeatOffset(&reps, ofv, ll)
		if off == 0 {
			return 0, 0, corruptf("sequence %d: repeat offset 1 minus 1 is zero", i)
		}

		// State updates need at most 9+9+8 bits; reload only if the
		// extra bits used up too much of the 57.
		if i+1 < nbSeq {
			if extra > 31 {
				bPtr, bVal, bCons = slowReload(bIn, bPtr, bVal, bCons)
			}
			n := uint(lle.nbBits)
			llS = uint64(lle.newState) + (bVal<<(bCons&63))>>1>>((63-n)&63)
			bCons += n
			n = uint(mle.nbBits)
			mlS = uint64(mle.newState) + (bVal<<(bCons&63))>>1>>((63-n)&63)
			bCons += n
			n = uint(ofe.nbBits)
			ofS = uint64(ofe.newState) + (bVal<<(bCons&63))>>1>>((63-n)&63)
			bCons += n
		}

		// Execute: literals, then the match.
		if ll > len(lits)-litPos {
			return 0, 0, corruptf("sequence %d: literal length %d exceeds remaining literals %d", i, ll, len(lits)-litPos)
		}
		if ml+ll > limit-cur {
			return 0, 0, corruptf("sequence %d: block output exceeds maximum block size %d", i, r.blockMax)
		}
		copyLiterals(buf, cur, lits, litPos, ll)
		litPos += ll
		cur += ll
		if off > hist+(cur-start) || off > window {
			return 0, 0, corruptf("sequence %d: offset %d exceeds available history %d", i, off, min(hist+(cur-start), window))
		}
		if !copyMatch(buf, cur, off, ml, r.wrapAt) {
			return 0, 0, corruptf("sequence %d: offset %d outside window buffer", i, off)
		}
		cur += ml
	}
	br.ptr, br.value, br.consumed = bPtr, bVal, bCons
	if !br.finished() {
		return 0, 0, corrupt("sequences bitstream not consumed exactly")
	}
	d.reps = reps
	return cur, litPos, nil
}

// repeatOffset turns an Offset_Value into the match offset, updating the
// repeat offsets (section 3.1.2.5). It returns 0 for the one invalid case,
// repeat offset 1 minus 1.
func repeatOffset(reps *[3]int, ofv, ll int) int {
	if ofv > 3 {
		off := ofv - 3
		reps[0], reps[1], reps[2] = off, reps[0], reps[1]
		return off
	}
	idx := ofv
	if ll == 0 {
		idx++
	}
	switch idx {
	case 1:
		return reps[0]
	case 2:
		reps[0], reps[1] = reps[1], reps[0]
		return reps[0]
	case 3:
		reps[0], reps[1], reps[2] = reps[2], reps[0], reps[1]
		return reps[0]
	}
	off := reps[0] - 1
	if off == 0 {
		return 0
	}
	reps[0], reps[1], reps[2] = off, reps[0], reps[1]
	return off
}

// copyLiterals copies ll literals from lits[litPos:] to buf[cur:]. Short
// runs copy 32 bytes blindly when lits has the capacity: litBuf is
// allocated with wildSlack spare bytes, and raw literals alias the input
// buffer, usually with room after them; the ring keeps wildSlack spare
// bytes past the block (see ensureSpace). Bytes past ll are overwritten
// later.
func copyLiterals(buf []byte, cur int, lits []byte, litPos, ll int) {
	if ll <= 32 && litPos+32 <= cap(lits) {
		l := lits[litPos : litPos+32]
		d := buf[cur : cur+32]
		copy16(d[0:16], l[0:16])
		copy16(d[16:32], l[16:32])
		return
	}
	copy(buf[cur:cur+ll], lits[litPos:litPos+ll])
}

// copyMatch copies the ml-byte match at distance off to buf[cur:]; false
// when its source lies outside the ring.
func copyMatch(buf []byte, cur, off, ml, wrapAt int) bool {
	if off > cur {
		// The source starts in the older lap of the ring, which
		// ends at wrapAt, and may continue at buf[0].
		s := wrapAt - (off - cur)
		if s < 0 || wrapAt > len(buf) {
			return false
		}
		n1 := wrapAt - s
		if n1 >= ml {
			copy(buf[cur:cur+ml], buf[s:s+ml])
		} else {
			copy(buf[cur:cur+n1], buf[s:wrapAt])
			copyOverlap(buf, cur+n1, 0, ml-n1)
		}
		return true
	}
	s := cur - off
	switch {
	case off >= 16:
		// Each 16-byte step reads only bytes already final. The first 32
		// bytes are copied unconditionally (ml is usually short); writing
		// up to 32 bytes past cur stays within wildSlack.
		d := buf[cur : cur+32]
		m := buf[s : s+32]
		copy16(d[0:16], m[0:16])
		copy16(d[16:32], m[16:32])
		if ml > 32 {
			if ml > 256 && off >= ml {
				copy(buf[cur+32:cur+ml], buf[s+32:s+ml])
			} else {
				for k := 32; k < ml; k += 16 {
					copy16(buf[cur+k:cur+k+16], buf[s+k:s+k+16])
				}
			}
		}
	case off >= ml:
		copy(buf[cur:cur+ml], buf[s:s+ml])
	case off >= 8 && ml <= 64:
		for k := 0; k < ml; k += 8 {
			copy8(buf[cur+k:cur+k+8], buf[s+k:s+k+8])
		}
	default:
		copyOverlap(buf, cur, s, ml)
	}
	return true
}

// copyOverlap copies n bytes from buf[s:] to buf[d:] (s < d) with the
// forward, self-overlapping semantics of a match: the region between s and
// d repeats, and each copy() doubles it.
func copyOverlap(buf []byte, d, s, n int) {
	for n > 0 {
		k := copy(buf[d:d+n], buf[s:d])
		d += k
		n -= k
	}
}

func copy16(dst, src []byte) {
	_ = dst[15]
	_ = src[15]
	binary.LittleEndian.PutUint64(dst[0:8], binary.LittleEndian.Uint64(src[0:8]))
	binary.LittleEndian.PutUint64(dst[8:16], binary.LittleEndian.Uint64(src[8:16]))
}

func copy8(dst, src []byte) {
	binary.LittleEndian.PutUint64(dst[0:8], binary.LittleEndian.Uint64(src[0:8]))
}

// slowReload is bitReader.reload on unpacked state, for the sequence loop.
func slowReload(in []byte, ptr int, value uint64, consumed uint) (int, uint64, uint) {
	b := bitReader{in: in, ptr: ptr, value: value, consumed: consumed}
	b.reload()
	return b.ptr, b.value, b.consumed
}
