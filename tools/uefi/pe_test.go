package uefi

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

// SetPETimestamp's checksum is the PE one: rewriting a real image's own
// timestamp keeps the checksum its linker wrote, and another timestamp
// changes both fields and nothing else.
func TestSetPETimestamp(t *testing.T) {
	orig, err := os.ReadFile("/usr/lib/systemd/boot/efi/linuxx64.efi.stub")
	if err != nil {
		t.Skip("systemd-boot-efi not installed")
	}
	pe := int(binary.LittleEndian.Uint32(orig[0x3c:]))
	ts, sum := binary.LittleEndian.Uint32(orig[pe+8:]), binary.LittleEndian.Uint32(orig[pe+88:])
	if sum == 0 {
		t.Skip("the stub carries no checksum to compare with")
	}
	b := bytes.Clone(orig)
	if err := SetPETimestamp(b, ts); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, orig) {
		t.Fatalf("same timestamp: checksum %#x, the linker wrote %#x", binary.LittleEndian.Uint32(b[pe+88:]), sum)
	}
	if err := SetPETimestamp(b, 1704067200); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(b[pe+8:]); got != 1704067200 {
		t.Errorf("timestamp %d, want %d", got, 1704067200)
	}
	for i := range b {
		if b[i] != orig[i] && (i < pe+8 || i >= pe+12) && (i < pe+88 || i >= pe+92) {
			t.Fatalf("byte %#x changed outside the timestamp and checksum", i)
		}
	}
	if err := SetPETimestamp([]byte("MZ not a PE image, far too short for one"), 1); err == nil {
		t.Error("a non-PE file was patched")
	}
}
