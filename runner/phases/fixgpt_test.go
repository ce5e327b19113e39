package phases

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/gpt"
)

// The QEMU host-OS image is MBR-partitioned: nothing to move, and growRoot
// must be refused rather than silently ignored.
func TestFixGPTOnMBRDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk")
	img := make([]byte, 1<<20)
	img[446+4] = 0x0e // FAT16 partition entry, not a protective 0xEE
	img[510], img[511] = 0x55, 0xaa
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := FixGPT(p, false)
	if err != nil || !strings.Contains(msg, "MBR") {
		t.Fatalf("FixGPT = %q, %v", msg, err)
	}
	if _, err := FixGPT(p, true); !errors.Is(err, gpt.ErrNotGPT) || !strings.Contains(err.Error(), "growRoot") {
		t.Fatalf("growRoot on MBR: %v", err)
	}
}
