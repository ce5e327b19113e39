//go:build linux

// Command hostready is the uinit of the QEMU tests' host OS: it loads the
// drivers its devices ask for, finds the CIDATA NoCloud seed, brings the
// network up with DHCP, phones home like cloud-init would, then idles.
// Every console line starts with "CURE-HOSTOS: " so tests can grep them.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/qemu-test/hostos/cidata"
	"github.com/cure-oss/cure/qemu-test/hostos/phonehome"
	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/pid1"
	"github.com/cure-oss/cure/tools/mdraid"
	"github.com/cure-oss/cure/tools/version"
	"golang.org/x/sys/unix"
)

const seedDir = "/run/cidata"

// fatModules have no modalias, so nothing asks for them: vfat plus the
// code pages a FAT mount needs (Debian's default iocharset is ascii).
var fatModules = []string{"vfat", "nls_cp437", "nls_iso8859_1", "nls_ascii"}

func main() {
	if os.Getpid() != 1 && version.Requested(os.Args[1:]) {
		fmt.Println(version.String("hostready"))
		return
	}
	log := slog.New(slog.NewTextHandler(&prefixWriter{w: os.Stdout, prefix: []byte("CURE-HOSTOS: ")},
		&slog.HandlerOptions{ReplaceAttr: dropTime}))
	if err := run(log); err != nil {
		log.Error("host OS not ready", "err", err)
	} else {
		log.Info("ready")
	}
	// Stay up: returning would make init exit and the kernel panic. A bare
	// select{} would be reported by the Go runtime as a deadlock and exit.
	for {
		time.Sleep(time.Hour)
	}
}

func run(log *slog.Logger) error {
	ctx := context.Background()
	if err := pid1.MountPseudoFS(); err != nil {
		log.Warn("pseudo filesystems", "err", err)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	kver := unix.ByteSliceToString(u.Release[:])
	log.Info("booted", "kernel", kver, "uptime_ms", uptime().Milliseconds())

	mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	loaded, err := boot.LoadModulesForDevices(mctx, "/sys", filepath.Join("/lib/modules", kver), log,
		boot.WithAlwaysLoad("vfat", "nls_cp437", "nls_iso8859_1", "nls_ascii"))
	cancel()
	log.Info("modules loaded", "modules", strings.Join(loaded, ","), "err", err)

	dev, err := waitForSeedDevice(ctx, log, 30*time.Second)
	if err != nil {
		return err
	}
	if err := cidata.MountReadOnly(dev, seedDir); err != nil {
		return err
	}
	seed, err := cidata.ReadSeed(seedDir)
	if err != nil {
		return err
	}
	log.Info("seed read", "device", dev, "instance_id", seed.InstanceID, "hostname", seed.Hostname)
	if seed.Hostname != "" {
		if err := unix.Sethostname([]byte(seed.Hostname)); err != nil {
			log.Warn("setting hostname", "err", err)
		}
	}

	nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	lease, err := boot.ConfigureNetwork(nctx, log)
	cancel()
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	log.Info("network up", "lease", lease.String())

	report := phonehome.Report{
		InstanceID: seed.InstanceID,
		Hostname:   seed.Hostname,
		BootID:     bootID(),
		Uptime:     uptime(),
	}
	return phonehome.Post(ctx, seed.PhoneHome.URL, report, phonehome.Options{Tries: seed.PhoneHome.Tries}, log)
}

// waitForSeedDevice polls because NVMe namespaces and their partitions
// appear asynchronously after the driver binds.
func waitForSeedDevice(ctx context.Context, log *slog.Logger, budget time.Duration) (string, error) {
	deadline := time.Now().Add(budget)
	for {
		// Members of an md RAID1 (metadata 1.0) each read as the whole
		// disk: the seed is on every one; read the lowest slot's.
		members := cidata.MDMembers("/sys", "/dev")
		dev, err := cidata.FindByLabelExcept("/sys", "/dev", "CIDATA", cidata.OtherMembers(members))
		if err == nil {
			for _, m := range members {
				log.Info("md member", "disk", m.Disk, "array", mdraid.UUID(m.SB.ArrayUUID), "name", m.SB.Name,
					"level", m.SB.Level, "raid_disks", m.SB.RaidDisks, "slot", m.SB.Role(), "metadata", m.SB.Version, "events", m.SB.Events)
			}
			return dev, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no CIDATA seed after %s: %w", budget, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// dropTime removes the wall-clock time: the guest clock is meaningless here
// and the kernel already timestamps the console.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// prefixWriter starts every line with prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) > 0 {
			out.Write(p.prefix)
			out.Write(line)
		}
	}
	if _, err := p.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
