package zstd

import "math/bits"

// fseEntry is one decoding state (RFC 8878 section 4.1.1): the symbol it
// emits and how the next state is formed (newState + nbBits read bits).
type fseEntry struct {
	sym      uint8
	nbBits   uint8
	newState uint16
}

// readNCount parses an FSE table description (RFC 8878 section 4.1.1) into
// norm and returns the accuracy log, the number of symbols described and the
// bytes consumed. maxLog and maxSym bound what the caller's context allows.
func readNCount(in []byte, norm []int16, maxSym int, maxLog uint8) (log uint8, nsym int, used int, err error) {
	f := fwdBitReader{in: in}
	log = uint8(f.peek()&15) + 5
	f.skip(4)
	if log > maxLog {
		return 0, 0, 0, corruptf("FSE accuracy log %d exceeds maximum %d", log, maxLog)
	}
	remaining := int32(1)<<log + 1
	threshold := int32(1) << log
	nbBits := uint(log) + 1
	sym := 0
	for remaining > 1 {
		if sym > maxSym {
			return 0, 0, 0, corruptf("FSE description has more than %d symbols", maxSym+1)
		}
		v := f.peek()
		max := 2*threshold - 1 - remaining
		var count int32
		if low := int32(v & uint64(threshold-1)); low < max {
			count = low
			f.skip(nbBits - 1)
		} else {
			count = int32(v & uint64(2*threshold-1))
			if count >= threshold {
				count -= max
			}
			f.skip(nbBits)
		}
		count-- // value 0 encodes probability -1 ("less than 1")
		if count < 0 {
			remaining--
		} else {
			remaining -= count
		}
		norm[sym] = int16(count)
		sym++
		if count == 0 {
			// A zero is followed by 2-bit repeat flags giving more zeros;
			// 3 means "3 more, and another flag follows".
			for {
				rep := int(f.peek() & 3)
				f.skip(2)
				if sym+rep > maxSym+1 {
					return 0, 0, 0, corrupt("FSE description zero run exceeds symbol range")
				}
				for i := 0; i < rep; i++ {
					norm[sym] = 0
					sym++
				}
				if rep != 3 {
					break
				}
			}
		}
		for remaining < threshold && threshold > 1 {
			nbBits--
			threshold >>= 1
		}
		if f.pos > uint(len(in))*8 {
			return 0, 0, 0, errTruncatedTable
		}
	}
	if remaining != 1 {
		return 0, 0, 0, corrupt("FSE probabilities do not sum to table size")
	}
	used = int((f.pos + 7) >> 3)
	if used > len(in) {
		return 0, 0, 0, errTruncatedTable
	}
	return log, sym, used, nil
}

var errTruncatedTable = corrupt("FSE table description truncated")

// buildFSE spreads symbols over the table and derives each state's
// transition (RFC 8878 section 4.1.1, "FSE table" construction). out must
// have 1<<log entries.
func buildFSE(norm []int16, log uint8, out []fseEntry) error {
	size := 1 << log
	mask := size - 1
	high := size - 1
	var next [256]uint16
	for s, c := range norm {
		if c == -1 {
			// Low-probability symbols go at the end, one cell each.
			if high < 0 {
				return corrupt("FSE table overfull")
			}
			out[high].sym = uint8(s)
			high--
			next[s] = 1
		} else if c >= 0 {
			next[s] = uint16(c)
		} else {
			return corrupt("FSE invalid probability")
		}
	}
	step := size>>1 + size>>3 + 3
	pos := 0
	for s, c := range norm {
		for i := 0; i < int(c); i++ {
			out[pos].sym = uint8(s)
			pos = (pos + step) & mask
			for pos > high {
				pos = (pos + step) & mask
			}
		}
	}
	if pos != 0 {
		return corrupt("FSE table spread did not end at position 0")
	}
	for u := 0; u < size; u++ {
		s := out[u].sym
		n := uint(next[s])
		next[s]++
		if n == 0 {
			return corrupt("FSE table inconsistent")
		}
		nb := uint(log) - uint(bits.Len(n)-1)
		out[u].nbBits = uint8(nb)
		out[u].newState = uint16((n << nb) - uint(size))
	}
	return nil
}
