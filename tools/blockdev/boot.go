package blockdev

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// MarkBootMedium sets BootMedium on every disk that backs a mounted
// filesystem (mountsPath, normally /proc/self/mounts) or that root= or
// cure.bootdev= on cmdline names, directly or through a partition or a
// stacked dm/md device.
//
// It fails rather than guessing when it cannot tell: an unreadable mounts
// file, a mounted /dev/mapper name, or a root= given as UUID=/LABEL=/
// major:minor, which this package cannot map to a disk. A disk that is
// wrongly left unmarked could be overwritten; a refusal costs one retry.
func MarkBootMedium(disks []Disk, mountsPath, cmdline string) error {
	f, err := os.Open(mountsPath)
	if err != nil {
		return fmt.Errorf("boot medium detection: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		src := unescapeMount(fields[0])
		if !strings.HasPrefix(src, "/dev/") || src == "/dev/root" {
			continue // pseudo filesystems; /dev/root is covered by root=
		}
		if strings.HasPrefix(src, "/dev/mapper/") {
			return fmt.Errorf("boot medium detection: %s:%d: %s is mounted on %s and device-mapper names cannot be traced to a disk here; unmount it first",
				mountsPath, line, src, unescapeMount(fields[1]))
		}
		mark(disks, devName(src))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("boot medium detection: read %s: %w", mountsPath, err)
	}
	for _, param := range []string{"root", "cure.bootdev"} {
		for _, v := range cmdlineValues(cmdline, param) {
			name, err := resolveCmdlineDev(v)
			if err != nil {
				return fmt.Errorf("boot medium detection: kernel parameter %s=%s: %w", param, v, err)
			}
			mark(disks, name)
		}
	}
	return nil
}

func mark(disks []Disk, name string) {
	for i := range disks {
		d := &disks[i]
		if d.Name == name || slices.Contains(d.Partitions, name) || slices.Contains(d.Holders, name) {
			d.BootMedium = true
		}
	}
}

var majMin = regexp.MustCompile(`^[0-9a-fA-F]+(:[0-9a-fA-F]+)?$`)

// resolveCmdlineDev maps a root=-style value to a block device name.
func resolveCmdlineDev(v string) (string, error) {
	switch {
	case strings.Contains(v, "="):
		return "", fmt.Errorf("%q is an identifier (UUID=/PARTUUID=/LABEL=) that cannot be resolved without reading every disk; name the device as /dev/NAME", v)
	case majMin.MatchString(v):
		return "", fmt.Errorf("%q is a device number; name the device as /dev/NAME", v)
	case strings.HasPrefix(v, "/dev/disk/"):
		target, err := filepath.EvalSymlinks(v)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", v, err)
		}
		return devName(target), nil
	}
	return devName(v), nil
}

func devName(p string) string { return filepath.Base(strings.TrimPrefix(p, "/dev/")) }

func cmdlineValues(cmdline, key string) []string {
	var out []string
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok && v != "" {
			out = append(out, strings.Trim(v, `"`))
		}
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for space) in /proc/mounts.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if o := s[i+1 : i+4]; o[0] >= '0' && o[0] <= '3' && o[1] >= '0' && o[1] <= '7' && o[2] >= '0' && o[2] <= '7' {
				b.WriteByte((o[0]-'0')<<6 | (o[1]-'0')<<3 | (o[2] - '0'))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
