package vbmc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Architectures a QEMUMachine emulates (QEMUConfig.Arch).
const (
	ArchAMD64 = "amd64" // q35, SeaBIOS or OVMF (the default)
	ArchARM64 = "arm64" // virt, AAVMF (UEFI only), TCG
)

// AAVMF firmware (Debian's qemu-efi-aarch64) for arm64 nodes.
const (
	AAVMFCode = "/usr/share/AAVMF/AAVMF_CODE.fd"
	AAVMFVars = "/usr/share/AAVMF/AAVMF_VARS.fd"
)

// DirectBoot stands in for the boot loaders an arm64 node lacks here:
// Debian ships no arm64 iPXE, and the test disk's loaders are x86's. For a
// network boot the machine fetches the coordinator's per-MAC iPXE script
// itself, as iPXE would (with ?arch=arm64), and QEMU boots its kernel,
// initrd and command line through the firmware (AAVMF's fw_cfg loader);
// a script that says exit falls through to the disk, as iPXE's exit does.
// For a disk boot it boots DiskKernel and DiskInitrd with the disk attached
// (the installed OS reads its seed from the disk). docs/ARM.md.
type DirectBoot struct {
	// ScriptURL is the node's per-MAC script as the host reaches it.
	ScriptURL string
	// Host replaces the host:port of the script's kernel and initrd URLs
	// (the guest's view, e.g. 10.0.2.2:8080) when this host fetches them.
	Host string
	// DiskKernel, DiskInitrd and DiskAppend boot the installed OS.
	DiskKernel, DiskInitrd, DiskAppend string
}

// checkArch validates the architecture settings and fills arm64's
// defaults: its QEMU binary and AAVMF.
func checkArch(cfg *QEMUConfig, where string) error {
	switch cfg.Arch {
	case "", ArchAMD64:
		if cfg.Direct != nil {
			return fmt.Errorf("%s: Direct is for arm64 nodes (x86 ones PXE-boot iPXE)", where)
		}
		return nil
	case ArchARM64:
	default:
		return fmt.Errorf("%s: Arch %q: want %s or %s", where, cfg.Arch, ArchAMD64, ArchARM64)
	}
	if cfg.Binary == "" {
		cfg.Binary = "qemu-system-aarch64"
	}
	if cfg.OVMFCode == "" {
		cfg.OVMFCode, cfg.OVMFVars = AAVMFCode, AAVMFVars
	}
	if cfg.TPM || cfg.SecureBoot {
		return fmt.Errorf("%s: arm64: no TPM or Secure Boot in this harness (QEMU virt has no tpm-crb; AAVMF's Secure Boot is not wired)", where)
	}
	return nil
}

// machineType is QEMU's -machine for the node's architecture.
func (q *QEMUMachine) machineType() string {
	if q.cfg.Arch == ArchARM64 {
		return "virt"
	}
	return "q35"
}

// prepareDirect sets q.direct, the -kernel/-initrd/-append of this boot
// (nil: the firmware boots dev itself).
func (q *QEMUMachine) prepareDirect(ctx context.Context, dev BootDevice) error {
	q.direct = nil
	if q.cfg.Arch == ArchARM64 {
		q.mode = ModeUEFI // AAVMF is the only firmware
	}
	d := q.cfg.Direct
	if d == nil {
		return nil
	}
	if dev == BootPxe && d.ScriptURL != "" {
		args, err := q.fetchScript(ctx, d)
		if err != nil || args != nil {
			q.direct = args
			return err
		}
		// The script said exit: on to the disk.
	}
	if d.DiskKernel != "" {
		q.direct = []string{"-kernel", d.DiskKernel, "-initrd", d.DiskInitrd, "-append", d.DiskAppend}
	}
	return nil
}

// fetchScript reads the per-MAC iPXE script and fetches what it boots;
// nil args for a script that boots nothing.
func (q *QEMUMachine) fetchScript(ctx context.Context, d *DirectBoot) ([]string, error) {
	script, err := httpGet(ctx, d.ScriptURL, "")
	if err != nil {
		return nil, fmt.Errorf("qemu node %s: direct boot: %w", q.cfg.Name, err)
	}
	var kernelURL, initrdURL string
	var cmdline []string
	sc := bufio.NewScanner(strings.NewReader(string(script)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "kernel":
			kernelURL = f[1]
			for _, a := range f[2:] {
				// The EFI stub would look for initrd= on the firmware's
				// file system; QEMU hands it the initrd itself.
				if !strings.HasPrefix(a, "initrd=") {
					cmdline = append(cmdline, a)
				}
			}
		case len(f) == 2 && f[0] == "initrd":
			initrdURL = f[1]
		}
	}
	if kernelURL == "" {
		q.log.Info("direct boot: the script boots nothing", "script", strings.TrimSpace(string(script)))
		return nil, nil
	}
	if initrdURL == "" {
		return nil, fmt.Errorf("qemu node %s: direct boot: script has a kernel and no initrd:\n%s", q.cfg.Name, script)
	}
	kernel, initrd := filepath.Join(q.cfg.RunDir, "direct-kernel"), filepath.Join(q.cfg.RunDir, "direct-initrd")
	for dst, u := range map[string]string{kernel: kernelURL, initrd: initrdURL} {
		if _, err := httpGet(ctx, u, d.Host, dst); err != nil {
			return nil, fmt.Errorf("qemu node %s: direct boot: %w", q.cfg.Name, err)
		}
	}
	return []string{"-kernel", kernel, "-initrd", initrd, "-append", strings.Join(cmdline, " ")}, nil
}

// httpGet fetches rawURL (its host replaced by host, when set) into
// memory, or into the file dst.
func httpGet(ctx context.Context, rawURL, host string, dst ...string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if host != "" {
		u.Host = host
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	if len(dst) == 0 {
		return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}
	f, err := os.Create(dst[0])
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return nil, f.Close()
}
