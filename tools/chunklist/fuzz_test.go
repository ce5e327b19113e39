package chunklist

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// FuzzParse: a chunk list arrives from the artifact server. Whatever its
// bytes, Parse does not panic or allocate beyond what the bytes hold, and a
// list it accepts marshals back to the same bytes.
func FuzzParse(f *testing.F) {
	l, err := Build(bytes.NewReader(data(3<<20)), BLAKE3, MinChunk)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(l.Marshal())
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Bind to what the header claims, so the fuzzer reaches the digests.
		sum, size := "", int64(0)
		if len(b) >= headerSize {
			sum, size = hex.EncodeToString(b[24:56]), int64(binary.LittleEndian.Uint64(b[16:]))
		}
		got, err := Parse(b, sum, size)
		if err != nil {
			return
		}
		if !bytes.Equal(got.Marshal(), b) {
			t.Fatalf("accepted list does not marshal back to its bytes")
		}
	})
}
