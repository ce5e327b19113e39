package builder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Kernel is a kernel found in an extracted kernel package tree.
type Kernel struct {
	Version    string // e.g. 6.1.0-56-amd64
	Vmlinuz    string // host path of boot/vmlinuz-<Version>
	ModulesDir string // host path of lib/modules/<Version>
}

// FindKernel locates the single kernel in root (a tree with boot/vmlinuz-*
// and lib/modules/<version>). It refuses a tree holding several kernels
// rather than guessing which one the image is for.
func FindKernel(root string) (Kernel, error) {
	matches, err := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if err != nil {
		return Kernel{}, err
	}
	switch len(matches) {
	case 0:
		return Kernel{}, fmt.Errorf("kernel root %s: expected boot/vmlinuz-<version>, found none", root)
	case 1:
	default:
		return Kernel{}, fmt.Errorf("kernel root %s: expected one boot/vmlinuz-<version>, found %d (%s); extract a single kernel", root, len(matches), strings.Join(matches, ", "))
	}
	k := Kernel{Vmlinuz: matches[0], Version: strings.TrimPrefix(filepath.Base(matches[0]), "vmlinuz-")}
	for _, base := range []string{"lib/modules", "usr/lib/modules"} {
		d := filepath.Join(root, base, k.Version)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			k.ModulesDir = d
			return k, nil
		}
	}
	return Kernel{}, fmt.Errorf("kernel root %s: found vmlinuz-%s but no lib/modules/%s", root, k.Version, k.Version)
}
