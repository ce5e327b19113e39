package checks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadString reads a sysfs attribute, trimmed of surrounding whitespace.
func ReadString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadInt reads a sysfs attribute holding one decimal integer.
func ReadInt(path string) (int64, error) {
	s, err := ReadString(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: expected an integer, found %q", path, s)
	}
	return n, nil
}

// ReadUint reads a sysfs attribute holding one unsigned decimal integer
// (64-bit counters such as InfiniBand port_xmit_data).
func ReadUint(path string) (uint64, error) {
	s, err := ReadString(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: expected an unsigned integer, found %q", path, s)
	}
	return n, nil
}
