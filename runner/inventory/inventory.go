// Package inventory collects what a CURE node is (identity: MACs, SMBIOS
// serial and UUID) and what it has (CPU, memory, NVMe, NICs, disks, GPUs)
// from sysfs, procfs, netlink and NVMe Identify. Every source is a path or a
// function in Options, so tests run against fixture trees.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/blockdev"
)

// Options says where to look. Root is the filesystem root holding sys/,
// proc/ and dev/ ("/" in production), the convention tools/* share.
type Options struct {
	Root    string
	BootMAC string // MAC of the interface that took the DHCP lease
	NodeID  string // cure.node=
	// Links lists network interfaces; nil means netlink.
	Links func() ([]Link, error)
	// OpenNVMe opens a controller for Identify; nil means tools/nvme.Open.
	// Set NoIdentify to read sysfs only (no device access).
	OpenNVMe   OpenFunc
	NoIdentify bool
	// KernelLog is read for the boot's machine checks; "" means
	// Root/dev/kmsg.
	KernelLog string
	Log       *slog.Logger
}

func (o *Options) path(p ...string) string {
	return filepath.Join(append([]string{o.Root}, p...)...)
}

// Collect gathers the inventory and identity. Missing optional sources
// (no DMI on some boards, no NVMe) are logged and left empty; it fails only
// when the root is unusable or ctx is done.
func Collect(ctx context.Context, o Options) (*curev1.Inventory, *curev1.Identity, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Links == nil {
		o.Links = NetlinkLinks
	}
	if _, err := os.Stat(o.path("sys")); err != nil {
		return nil, nil, fmt.Errorf("inventory: sysfs under %s: %w", o.Root, err)
	}
	warn := func(what string, err error) {
		o.Log.Warn("inventory: "+what+" unavailable", "err", err)
	}
	inv := &curev1.Inventory{}
	collectSystem(&o, inv, warn)
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("inventory: %w", err)
	}
	collectDevices(&o, inv, warn)
	return inv, identity(&o, inv), ctx.Err()
}

// collectSystem fills in the board, DIMMs, host errors, memory, CPUs and
// kernel; what cannot be read is warned about and left out.
func collectSystem(o *Options, inv *curev1.Inventory, warn func(string, error)) {
	tables, err := readSMBIOS(o.Root)
	if err == nil {
		if inv.System, err = systemFromSMBIOS(tables); err != nil {
			warn("smbios system", err)
		}
		if inv.Dimms, err = dimmsFromSMBIOS(tables); err != nil {
			warn("smbios memory devices", err)
		}
	} else {
		warn("smbios tables", err)
	}
	if inv.System == nil {
		// The kernel's class/dmi/id strings come from the same tables; they
		// are kept for boards whose tables the kernel decodes but u-root's
		// parser refuses (a malformed entry point or structure).
		inv.System = systemInfo(o)
	}
	hostErrors(o, inv, warn)
	if usable, phys, err := memory(o); err != nil {
		warn("memory", err)
	} else {
		inv.MemoryBytes, inv.MemoryPhysicalBytes = usable, phys
	}
	if procs, nodes, err := cpuAndTopology(o); err != nil {
		warn("cpu", err)
	} else {
		inv.Processors, inv.NumaNodes = procs, nodes
	}
	for _, p := range inv.Processors {
		inv.CpuCount += p.Threads
		if inv.CpuModel == "" {
			inv.CpuModel = p.Model
		}
	}
	if k, err := readTrim(o.path("proc/sys/kernel/osrelease")); err != nil {
		warn("kernel release", err)
	} else {
		inv.Kernel = k
	}
}

// collectDevices fills in the NVMe controllers, NICs, disks, GPUs,
// NVSwitches and PCIe links; what cannot be read is warned about.
func collectDevices(o *Options, inv *curev1.Inventory, warn func(string, error)) {
	ctrls, err := NVMeControllers(o.Root, o.OpenNVMe, o.NoIdentify, o.Log)
	if err != nil {
		warn("nvme", err)
	}
	for _, c := range ctrls {
		inv.Nvme = append(inv.Nvme, c.Proto())
	}

	if inv.Nics, err = nics(o); err != nil {
		warn("nics", err)
	}

	disks, err := Disks(o.Root)
	if err != nil {
		warn("block devices", err)
	}
	for _, d := range disks {
		inv.Disks = append(inv.Disks, &curev1.BlockDevice{
			Name: d.Name, SizeBytes: d.SizeBytes, Model: d.Model, Serial: d.Serial,
			Transport: d.Transport, Removable: d.Removable, BootMedium: d.BootMedium,
		})
	}

	devs, err := pciDevices(o, loadPCIDB(o))
	if err != nil {
		warn("pci devices", err)
	}
	nicPCI(inv.Nics, devs)
	inv.Gpus, inv.Nvswitches = gpusAndSwitches(devs)
	if inv.PcieLinks, err = pcieLinks(o.Root, devs); err != nil {
		warn("pcie links", err)
	}
}

// identity is how the coordinator knows the node: boot MAC, the board's
// serial and UUID, every NIC's MAC.
func identity(o *Options, inv *curev1.Inventory) *curev1.Identity {
	id := &curev1.Identity{
		BootMac:      strings.ToLower(o.BootMAC),
		SystemSerial: inv.System.GetSerial(),
		SystemUuid:   inv.System.GetUuid(),
		NodeId:       o.NodeID,
	}
	for _, n := range inv.Nics {
		if n.Mac != "" {
			id.Macs = append(id.Macs, n.Mac)
		}
	}
	sort.Strings(id.Macs)
	return id
}

// Disks lists block devices with the boot medium marked. When the boot
// medium cannot be determined the error says so and the list is still
// returned, for display only: a caller that writes must refuse.
func Disks(root string) ([]blockdev.Disk, error) {
	disks, err := blockdev.List(root)
	if err != nil {
		return nil, err
	}
	cmdline, err := os.ReadFile(filepath.Join(root, "proc/cmdline"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return disks, fmt.Errorf("reading kernel command line for boot medium detection: %w", err)
	}
	if err := blockdev.MarkBootMedium(disks, filepath.Join(root, "proc/self/mounts"), string(cmdline)); err != nil {
		return disks, fmt.Errorf("boot medium detection: %w", err)
	}
	return disks, nil
}

// systemInfo reads the SMBIOS strings the kernel exports under class/dmi/id
// (the fallback when the raw tables cannot be parsed).
func systemInfo(o *Options) *curev1.SystemInfo {
	dmi := func(f string) string {
		v, err := readTrim(o.path("sys/class/dmi/id", f))
		if err != nil {
			o.Log.Debug("inventory: dmi field unreadable", "field", f, "err", err)
		}
		return v
	}
	return &curev1.SystemInfo{
		Vendor:      dmi("sys_vendor"),
		Product:     dmi("product_name"),
		Serial:      dmi("product_serial"),
		Uuid:        strings.ToLower(dmi("product_uuid")),
		BiosVersion: dmi("bios_version"),
	}
}

// readTrim reads a sysfs or procfs file. SMBIOS strings (class/dmi/id)
// are the firmware's bytes and need not be UTF-8, which protobuf strings
// must be: invalid sequences become U+FFFD.
func readTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD"), nil
}
