package chunklist

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

func data(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{7})
	r.Read(b)
	return b
}

func TestBuildParseCheck(t *testing.T) {
	for _, alg := range []Alg{SHA256, BLAKE3} {
		b := data(3*MinChunk + 100)
		l, err := Build(bytes.NewReader(b), alg, MinChunk)
		if err != nil {
			t.Fatal(err)
		}
		whole := sha256.Sum256(b)
		if l.Whole != whole || l.Size != int64(len(b)) || len(l.Digests) != 4 {
			t.Fatalf("%s: whole %x size %d chunks %d", alg, l.Whole, l.Size, len(l.Digests))
		}
		p, err := Parse(l.Marshal(), hex.EncodeToString(whole[:]), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Digests {
			from, to := p.Span(i)
			if err := p.Check(i, b[from:to]); err != nil {
				t.Errorf("%s chunk %d: %v", alg, i, err)
			}
		}
		bad := append([]byte(nil), b[MinChunk:2*MinChunk]...)
		bad[9] ^= 1
		if err := p.Check(1, bad); err == nil || !strings.Contains(err.Error(), "chunk 1 (bytes 65536-131071): "+alg.String()+" mismatch") {
			t.Errorf("%s: corrupt chunk: %v", alg, err)
		}
		if err := p.Check(3, b[3*MinChunk:]); err != nil {
			t.Errorf("%s: short last chunk: %v", alg, err)
		}
		if err := p.Check(3, b[3*MinChunk:len(b)-1]); err == nil || !strings.Contains(err.Error(), "got 99 bytes, expected 100") {
			t.Errorf("%s: truncated last chunk: %v", alg, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	b := data(2 * MinChunk)
	l, _ := Build(bytes.NewReader(b), BLAKE3, MinChunk)
	good := l.Marshal()
	sum := hex.EncodeToString(l.Whole[:])
	other := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name string
		mut  func([]byte) []byte
		sum  string
		size int64
		want string
	}{
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, sum, l.Size, "not a CURECHK1 list"},
		{"alg", func(b []byte) []byte { b[8] = 9; return b }, sum, l.Size, "algorithm 9"},
		{"chunk size", func(b []byte) []byte { b[12] = 1; return b }, sum, l.Size, "chunk size 65537"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, sum, l.Size, "bytes of digests for 2 chunks"},
		{"other artifact", func(b []byte) []byte { return b }, other, l.Size, "belongs to another artifact"},
		{"other size", func(b []byte) []byte { return b }, sum, l.Size + 1, "belongs to another artifact"},
	} {
		_, err := Parse(c.mut(append([]byte(nil), good...)), c.sum, c.size)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func BenchmarkChunk(b *testing.B) {
	buf := data(DefaultChunk)
	for _, alg := range []Alg{SHA256, BLAKE3} {
		b.Run(alg.String(), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for range b.N {
				alg.Sum(buf)
			}
		})
	}
}
