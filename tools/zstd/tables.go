package zstd

// Code tables for sequences, RFC 8878 section 3.1.1.3.2.1.1 (baselines and
// extra bits) and 3.1.1.3.2.2 (predefined distributions).

const (
	maxLLSym = 35
	maxMLSym = 52
	maxOFSym = 31
	maxLLLog = 9
	maxMLLog = 9
	maxOFLog = 8
)

var llBase = [maxLLSym + 1]uint32{
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
	8192, 16384, 32768, 65536,
}

var llBits = [maxLLSym + 1]uint8{
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12,
	13, 14, 15, 16,
}

var mlBase = [maxMLSym + 1]uint32{
	3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
	19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
	35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
	4099, 8195, 16387, 32771, 65539,
}

var mlBits = [maxMLSym + 1]uint8{
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
	12, 13, 14, 15, 16,
}

var llDefault = []int16{
	4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
	-1, -1, -1, -1,
}

var mlDefault = []int16{
	1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
	-1, -1, -1, -1, -1,
}

var ofDefault = []int16{
	1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1,
}

// seqEntry is an FSE state with the symbol already turned into the value
// baseline and extra-bit count, so decoding a sequence needs no second
// table lookup.
type seqEntry struct {
	baseline uint32
	addBits  uint8
	nbBits   uint8
	newState uint16
}

type seqKind int

const (
	kindLL seqKind = iota
	kindML
	kindOF
)

func (k seqKind) String() string {
	switch k {
	case kindLL:
		return "literals lengths"
	case kindML:
		return "match lengths"
	case kindOF:
	}
	return "offsets"
}

// fillSeqTable converts an FSE table to seqEntries for kind k.
func fillSeqTable(k seqKind, fse []fseEntry, out []seqEntry) error {
	for i, e := range fse {
		s := e.sym
		var base uint32
		var add uint8
		switch k {
		case kindLL:
			if s > maxLLSym {
				return corruptf("literals length code %d out of range", s)
			}
			base, add = llBase[s], llBits[s]
		case kindML:
			if s > maxMLSym {
				return corruptf("match length code %d out of range", s)
			}
			base, add = mlBase[s], mlBits[s]
		case kindOF:
			fallthrough
		default:
			if s > maxOFSym {
				return corruptf("offset code %d out of range", s)
			}
			base, add = 1<<s, s
		}
		out[i] = seqEntry{baseline: base, addBits: add, nbBits: e.nbBits, newState: e.newState}
	}
	return nil
}

// seqTable entries are a fixed-size array so that indexing with a state
// masked to 9 bits needs no bounds check; only 1<<log entries are used.
type seqTable struct {
	entries *[1 << maxLLLog]seqEntry
	log     uint8
}

var predefLL, predefML, predefOF seqTable

func buildPredefined(k seqKind, norm []int16, log uint8) seqTable {
	fse := make([]fseEntry, 1<<log)
	if err := buildFSE(norm, log, fse); err != nil {
		panic("zstd: predefined table: " + err.Error())
	}
	out := new([1 << maxLLLog]seqEntry)
	if err := fillSeqTable(k, fse, out[:1<<log]); err != nil {
		panic("zstd: predefined table: " + err.Error())
	}
	return seqTable{entries: out, log: log}
}

func init() {
	predefLL = buildPredefined(kindLL, llDefault, 6)
	predefML = buildPredefined(kindML, mlDefault, 6)
	predefOF = buildPredefined(kindOF, ofDefault, 5)
}
