package transport

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BootID reads <procRoot>/sys/kernel/random/boot_id, unique per boot.
func BootID(procRoot string) (string, error) {
	p := filepath.Join(procRoot, "sys/kernel/random/boot_id")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("reading boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Uptime reads <procRoot>/uptime (seconds since boot, first field).
func Uptime(procRoot string) (time.Duration, error) {
	p := filepath.Join(procRoot, "uptime")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("reading uptime: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s: empty", p)
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("%s: expected seconds, found %q", p, f[0])
	}
	return time.Duration(s * float64(time.Second)), nil
}
