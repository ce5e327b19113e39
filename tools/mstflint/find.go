package mstflint

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
)

// New returns the Tool an image runs: the binaries are resolved once
// (PATH, then the usual bin directories, where the CURE image puts them)
// so the exec seam runs absolute paths, and device presence is checked
// under sysRoot.
func New(sysRoot string, log *slog.Logger) *Tool {
	return &Tool{SysRoot: sysRoot, Mstflint: resolve("mstflint"), Mstfwreset: resolve("mstfwreset"), Log: log}
}

// resolve finds name on PATH or in the usual bin directories; the bare
// name is returned when absent so that Available reports it by name.
func resolve(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return name
}

// CanReset reports whether mstfwreset is here: without it a burnt image
// activates only on a host reboot.
func (t *Tool) CanReset() bool {
	lp := t.LookPath
	if lp == nil {
		lp = exec.LookPath
	}
	_, err := lp(t.name(t.Mstfwreset, "mstfwreset"))
	return err == nil
}
