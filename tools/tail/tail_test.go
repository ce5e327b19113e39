package tail

import (
	"strings"
	"testing"
)

func TestBufferKeepsTheEnd(t *testing.T) {
	b := &Buffer{Max: 8}
	b.Write([]byte("abc"))
	if b.String() != "abc" {
		t.Fatalf("short: %q", b.String())
	}
	b.Write([]byte("defghij"))
	b.Write([]byte("kl"))
	if b.String() != "efghijkl" {
		t.Fatalf("after overflow: %q, want the last 8 bytes", b.String())
	}
	b.Write([]byte(strings.Repeat("x", 100) + "END"))
	if b.String() != "xxxxxEND" {
		t.Fatalf("one large write: %q", b.String())
	}
}
