package blockdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrNoFilesystem says a device holds none of the filesystems FSLabel knows.
var ErrNoFilesystem = errors.New("no ext4 or xfs superblock")

// FSLabel reads the type and label of the ext2/3/4 or XFS filesystem on
// r, from its superblock: the check after mkfs that the filesystem the
// installed OS mounts by label is there, without blkid in the image.
func FSLabel(r io.ReaderAt) (fstype, label string, err error) {
	b := make([]byte, 2048)
	if n, err := r.ReadAt(b, 0); n < len(b) {
		return "", "", fmt.Errorf("reading the first %d bytes: %w", len(b), err)
	}
	// XFS: big-endian "XFSB" at byte 0, sb_fname[12] at 108.
	if string(b[0:4]) == "XFSB" {
		return "xfs", cstring(b[108:120]), nil
	}
	// ext2/3/4: the superblock at 1024, s_magic 0xEF53 at +56 and
	// s_volume_name[16] at +120, little-endian.
	if binary.LittleEndian.Uint16(b[1024+56:]) == 0xEF53 {
		return "ext4", cstring(b[1024+120 : 1024+136]), nil
	}
	return "", "", ErrNoFilesystem
}

// FSLabelOf is FSLabel over the device or file at path.
func FSLabelOf(path string) (fstype, label string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("filesystem label of %s: %w", path, err)
	}
	defer f.Close()
	if fstype, label, err = FSLabel(f); err != nil {
		return "", "", fmt.Errorf("filesystem label of %s: %w", path, err)
	}
	return fstype, label, nil
}

func cstring(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\x00")
	return strings.ToValidUTF8(s, "\uFFFD")
}
