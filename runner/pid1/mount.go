// Package pid1 is what the CURE image's PID 1 does before and while the
// runner works: the pseudo filesystems, the environment, and a supervisor
// that starts the runner, restarts it if it ever ends and reaps every
// orphan. It imports nothing beyond the standard library and x/sys, so
// cure-init, built on its own, starts in milliseconds where the busybox
// (gRPC, protobuf, TLS) takes about half a second under emulation.
package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// pseudoMount is one filesystem the runner needs.
type pseudoMount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

var pseudoMounts = []pseudoMount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	// The debug shell's terminal (the kernel's one instance, so devtmpfs's /dev/ptmx serves it).
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620"},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	// The TPM's event log (binary_bios_measurements) is served there: the
	// runner sends it with its quote (runner/attestation).
	{"securityfs", "/sys/kernel/security", "securityfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
}

// MountPseudoFS mounts proc, sysfs, devtmpfs, devpts, securityfs and tmpfs
// on /run and /tmp unless they are mounted already (cure-init mounts them;
// the runner calls it again in case another init started it). Calling it
// twice is harmless.
func MountPseudoFS() error {
	mounted := map[string]bool{}
	if f, err := os.Open("/proc/self/mounts"); err == nil {
		mounted = mountedTargets(f)
		f.Close()
	}
	var errs []error
	for _, m := range pseudoMounts {
		if mounted[m.target] {
			continue
		}
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("creating mount point %s: %w", m.target, err))
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err))
		}
		if m.target == "/proc" && err == nil {
			// Now that /proc exists we can see what else is mounted.
			if f, err := os.Open("/proc/self/mounts"); err == nil {
				for k := range mountedTargets(f) {
					mounted[k] = true
				}
				f.Close()
			}
		}
	}
	return errors.Join(errs...)
}

// mountedTargets parses /proc/self/mounts into the set of mount points.
func mountedTargets(r io.Reader) map[string]bool {
	out := map[string]bool{}
	s := bufio.NewScanner(r)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) >= 2 {
			out[f[1]] = true
		}
	}
	return out
}
