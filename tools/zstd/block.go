package zstd

import "encoding/binary"

// blockDecoder holds the entropy state that Compressed_Blocks of one frame
// may reuse (RFC 8878 section 3.1.1.3): the last Huffman table (Treeless
// literals), the last sequence tables (Repeat_Mode) and repeat offsets.
type blockDecoder struct {
	huf    hufTable
	hasHuf bool

	ll, ml, of          seqTable
	hasLL, hasML, hasOF bool
	llBuf, mlBuf, ofBuf [1 << maxLLLog]seqEntry

	reps [3]int

	litBuf []byte
}

func (d *blockDecoder) resetFrame() {
	d.hasHuf = false
	d.hasLL, d.hasML, d.hasOF = false, false, false
	// Section 3.1.2.5: repeat offsets start at 1, 4, 8 in every frame.
	d.reps = [3]int{1, 4, 8}
}

// decodeLiterals parses the Literals_Section (RFC 8878 section 3.1.1.3.1)
// and returns the literals and the section's size. Raw literals alias src.
func (d *blockDecoder) decodeLiterals(src []byte, maxSize int) ([]byte, int, error) {
	if len(src) == 0 {
		return nil, 0, corrupt("missing literals section")
	}
	b0 := src[0]
	typ := b0 & 3
	sf := (b0 >> 2) & 3
	if typ < 2 {
		// Raw_Literals_Block or RLE_Literals_Block.
		var size, hl int
		switch sf {
		case 0, 2:
			size, hl = int(b0>>3), 1
		case 1:
			if len(src) < 2 {
				return nil, 0, corrupt("literals header truncated")
			}
			size, hl = int(b0>>4)|int(src[1])<<4, 2
		default:
			if len(src) < 3 {
				return nil, 0, corrupt("literals header truncated")
			}
			size, hl = int(b0>>4)|int(src[1])<<4|int(src[2])<<12, 3
		}
		if size > maxSize {
			return nil, 0, corruptf("literals size %d exceeds block maximum %d", size, maxSize)
		}
		if typ == 0 {
			if hl+size > len(src) {
				return nil, 0, corrupt("raw literals exceed block")
			}
			return src[hl : hl+size], hl + size, nil
		}
		if hl >= len(src) {
			return nil, 0, corrupt("RLE literals byte missing")
		}
		lits := d.litBuf[:size]
		fill(lits, src[hl])
		return lits, hl + 1, nil
	}

	// Compressed_Literals_Block or Treeless_Literals_Block.
	var regen, csize, hl int
	streams := 4
	switch sf {
	case 0, 1:
		if len(src) < 3 {
			return nil, 0, corrupt("literals header truncated")
		}
		v := int(b0) | int(src[1])<<8 | int(src[2])<<16
		regen, csize, hl = (v>>4)&0x3ff, v>>14, 3
		if sf == 0 {
			streams = 1
		}
	case 2:
		if len(src) < 4 {
			return nil, 0, corrupt("literals header truncated")
		}
		v := int(binary.LittleEndian.Uint32(src))
		regen, csize, hl = (v>>4)&0x3fff, v>>18, 4
	default:
		if len(src) < 5 {
			return nil, 0, corrupt("literals header truncated")
		}
		v := int(binary.LittleEndian.Uint32(src)) | int(src[4])<<32
		regen, csize, hl = (v>>4)&0x3ffff, v>>22, 5
	}
	if regen > maxSize {
		return nil, 0, corruptf("literals size %d exceeds block maximum %d", regen, maxSize)
	}
	if hl+csize > len(src) {
		return nil, 0, corrupt("compressed literals exceed block")
	}
	in := src[hl : hl+csize]
	if typ == 2 {
		n, err := d.readHuffmanTree(in)
		if err != nil {
			return nil, 0, err
		}
		in = in[n:]
	} else if !d.hasHuf {
		return nil, 0, corrupt("treeless literals without a previous Huffman table")
	}
	lits := d.litBuf[:regen]
	var err error
	if streams == 1 {
		err = decodeHuf1(&d.huf, lits, in)
	} else {
		err = decodeHuf4(&d.huf, lits, in)
	}
	if err != nil {
		return nil, 0, wrapCorrupt("Huffman literals", err)
	}
	return lits, hl + csize, nil
}

// readSeqTable handles one Symbol_Compression_Mode (RFC 8878 section
// 3.1.1.3.2.1) and returns the bytes of table description consumed.
func (d *blockDecoder) readSeqTable(k seqKind, mode byte, src []byte) (int, error) {
	var cur *seqTable
	var has *bool
	var bufArr *[1 << maxLLLog]seqEntry
	var predef seqTable
	var maxSym int
	var maxLog uint8
	switch k {
	case kindLL:
		cur, has, bufArr, predef, maxSym, maxLog = &d.ll, &d.hasLL, &d.llBuf, predefLL, maxLLSym, maxLLLog
	case kindML:
		cur, has, bufArr, predef, maxSym, maxLog = &d.ml, &d.hasML, &d.mlBuf, predefML, maxMLSym, maxMLLog
	case kindOF:
		fallthrough
	default:
		cur, has, bufArr, predef, maxSym, maxLog = &d.of, &d.hasOF, &d.ofBuf, predefOF, maxOFSym, maxOFLog
	}
	switch mode {
	case 0: // Predefined_Mode
		*cur = predef
		*has = true
		return 0, nil
	case 1: // RLE_Mode: one symbol, no state bits.
		if len(src) < 1 {
			return 0, corruptf("%v RLE symbol missing", k)
		}
		if int(src[0]) > maxSym {
			return 0, corruptf("%v RLE code %d out of range", k, src[0])
		}
		e := [1]fseEntry{{sym: src[0]}}
		if err := fillSeqTable(k, e[:], bufArr[:1]); err != nil {
			return 0, err
		}
		*cur = seqTable{entries: bufArr, log: 0}
		*has = true
		return 1, nil
	case 2: // FSE_Compressed_Mode
		var norm [maxMLSym + 1]int16
		log, nsym, n, err := readNCount(src, norm[:], maxSym, maxLog)
		if err != nil {
			return 0, wrapCorrupt(k.String()+" table", err)
		}
		var fse [1 << maxLLLog]fseEntry
		if err := buildFSE(norm[:nsym], log, fse[:1<<log]); err != nil {
			return 0, wrapCorrupt(k.String()+" table", err)
		}
		if err := fillSeqTable(k, fse[:1<<log], bufArr[:1<<log]); err != nil {
			return 0, err
		}
		*cur = seqTable{entries: bufArr, log: log}
		*has = true
		return n, nil
	default: // Repeat_Mode
		if !*has {
			return 0, corruptf("%v repeat mode without a previous table", k)
		}
		return 0, nil
	}
}

func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	if v == 0 {
		clear(b)
		return
	}
	// Doubling copy: each copy() call moves twice as many bytes.
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
