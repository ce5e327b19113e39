package harness

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// Arm64Nodes makes every node an arm64 one (make e2e-arm64): QEMU's virt
// machine under TCG with AAVMF, behind the same virtual BMC. Debian ships
// no arm64 iPXE, so the machine fetches the coordinator's per-MAC script
// itself and boots what it names (vbmc.DirectBoot); the installed OS boots
// HostOSImage's kernel and initrd with the node's disk attached, as the
// x86 test disk's loaders cannot run there (docs/ARM.md).
type Arm64Nodes struct {
	// HostOSImage is the arm64 test host OS (make hostos-arm64:
	// Out/hostos-image-arm64, vmlinuz and initramfs.cpio.zst).
	HostOSImage string
}

// arm64Node turns the node's machine into an arm64 one when the options
// ask for it, and narrows its BMC to UEFI.
func (e *Env) arm64Node(qc *vbmc.QEMUConfig, modes *[]string, httpPort int) {
	a := e.Opts.Arm64
	if a == nil {
		return
	}
	host := fmt.Sprintf("127.0.0.1:%d", httpPort)
	qc.Arch, qc.OVMFCode, qc.OVMFVars = vbmc.ArchARM64, vbmc.AAVMFCode, vbmc.AAVMFVars
	qc.Direct = &vbmc.DirectBoot{
		ScriptURL:  fmt.Sprintf("http://%s/ipxe/%s?arch=arm64", host, strings.ReplaceAll(qc.MAC, ":", "-")),
		Host:       host,
		DiskKernel: filepath.Join(a.HostOSImage, "vmlinuz"), DiskInitrd: filepath.Join(a.HostOSImage, "initramfs.cpio.zst"),
		DiskAppend: "console=ttyAMA0 panic=-1",
	}
	*modes = []string{vbmc.ModeUEFI}
}
