// Package evidence finds the kernel log lines about a component a verdict
// names ("nvme/0", "disk/nvme0n1", "nic/eth0", "gpu/3", "ib/mlx5_0/1",
// "cpu/1", "dimm/A1"): the names and PCI addresses the inventory and sysfs
// give the component's device, matched against the kernel log's messages
// and device dictionaries. The runner attaches the last of them to a
// failing verdict, so an RMA report shows what the kernel saw.
package evidence

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/kmsg"
	"github.com/cure-oss/cure/tools/mce"
)

// MaxLines is how many of a component's lines a verdict carries.
const MaxLines = 20

// Keys are what identifies a component's device in kernel log lines:
// PCI addresses and kernel device names. root holds sys/ (for InfiniBand
// devices and CPU topology, which the inventory does not carry).
type Keys struct {
	Names     []string // nvme0, nvme0n1, eth0, mlx5_0: matched as whole words
	Addresses []string // 0000:01:00.0: in messages and in DEVICE=+pci:<addr>
	CPUs      []int    // logical CPUs of a socket: "CPU 3:", "CPU3:"
	HWErrors  bool     // machine-check, EDAC and memory-failure lines
}

// Empty reports whether nothing identifies the component.
func (k Keys) Empty() bool {
	return len(k.Names) == 0 && len(k.Addresses) == 0 && len(k.CPUs) == 0 && !k.HWErrors
}

// String names the keys for a block title: "nvme0, 0000:01:00.0".
func (k Keys) String() string {
	var s []string
	s = append(s, k.Names...)
	s = append(s, k.Addresses...)
	if len(k.CPUs) > 0 {
		s = append(s, fmt.Sprintf("%d CPUs", len(k.CPUs)))
	}
	if k.HWErrors {
		s = append(s, "hardware errors")
	}
	return strings.Join(s, ", ")
}

// For returns the keys of component, from the inventory and root.
func For(component string, inv *curev1.Inventory, root string) Keys {
	var k Keys
	kind, rest, _ := strings.Cut(component, "/")
	addPCI := func(a string) {
		if a != "" && !slices.Contains(k.Addresses, a) {
			k.Addresses = append(k.Addresses, a)
		}
	}
	addName := func(n string) {
		if n != "" && !slices.Contains(k.Names, n) {
			k.Names = append(k.Names, n)
		}
	}
	nvme := func(c *curev1.NvmeController) {
		addName(c.GetName())
		for _, ns := range c.GetNamespaces() {
			addName(ns)
		}
		addPCI(c.GetPciAddress())
	}
	switch kind {
	case "nvme":
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i < len(inv.GetNvme()) {
			nvme(inv.GetNvme()[i])
		}
	case "disk":
		addName(rest)
		for _, c := range inv.GetNvme() {
			if slices.Contains(c.GetNamespaces(), rest) {
				nvme(c)
			}
		}
	case "nic":
		for i, n := range physicalNICs(inv) {
			if n.GetName() == rest || strconv.Itoa(i) == rest {
				addName(n.GetName())
				addPCI(n.GetPciAddress())
			}
		}
		if len(k.Names) == 0 && rest != "" && !isNumber(rest) {
			addName(rest)
		}
	case "ib":
		dev, _, _ := strings.Cut(rest, "/")
		addName(dev)
		if real, err := filepath.EvalSymlinks(filepath.Join(root, "sys/class/infiniband", dev, "device")); err == nil {
			addPCI(filepath.Base(real))
		}
	case "gpu":
		gpus := inv.GetGpus()
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i < len(gpus) {
			addPCI(gpus[i].GetPciAddress())
		} else if strings.Count(rest, ":") == 2 {
			addPCI(rest)
		}
	case "nvswitch":
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i < len(inv.GetNvswitches()) {
			addPCI(inv.GetNvswitches()[i].GetAddress())
		}
	case "cpu":
		if s, err := strconv.Atoi(rest); err == nil {
			k.CPUs = socketCPUs(root, s)
		}
	case "dimm", "memory", "host":
		k.HWErrors = true
	}
	return k
}

func isNumber(s string) bool { _, err := strconv.Atoi(s); return err == nil }

// physicalNICs orders NICs as the hardware check numbers them (nic/N):
// those with a PCI address, by address.
func physicalNICs(inv *curev1.Inventory) []*curev1.NetInterface {
	var out []*curev1.NetInterface
	for _, n := range inv.GetNics() {
		if n.GetPciAddress() != "" {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetPciAddress() < out[j].GetPciAddress() })
	return out
}

// socketCPUs lists the logical CPUs of a physical package.
func socketCPUs(root string, socket int) []int {
	dirs, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/cpu/cpu[0-9]*"))
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "topology/physical_package_id"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(socket) {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "cpu")); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// Match reports whether a kernel log record is about the keys.
func (k Keys) Match(r kmsg.Record) bool {
	for _, a := range k.Addresses {
		if strings.HasSuffix(r.Device, ":"+a) || strings.Contains(r.Message, a) {
			return true
		}
		// NVIDIA's driver names a GPU "PCI:0000:1b:00" (no function).
		if i := strings.LastIndexByte(a, '.'); i > 0 && strings.Contains(r.Message, "PCI:"+a[:i]) {
			return true
		}
	}
	for _, n := range k.Names {
		if containsWord(r.Message, n) {
			return true
		}
	}
	for _, c := range k.CPUs {
		if strings.Contains(r.Message, fmt.Sprintf("CPU %d:", c)) || strings.Contains(r.Message, fmt.Sprintf("CPU%d:", c)) {
			return true
		}
	}
	return k.HWErrors && mce.Evidence(r.Message)
}

// containsWord finds w in s with no letter, digit or underscore on either side.
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(w)
		if (j == 0 || !wordByte(s[j-1])) && (end == len(s) || !wordByte(s[end])) {
			return true
		}
		i = j + 1
	}
}

func wordByte(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// Attach appends to msg the last MaxLines records about keys, as a kernel
// log evidence block; msg is returned as is when none match.
func Attach(msg string, recs []kmsg.Record, keys Keys) string {
	if keys.Empty() {
		return msg
	}
	last, n := kmsg.Matching(recs, MaxLines, keys.Match)
	if n == 0 {
		return msg
	}
	lines := make([]string, len(last))
	for i, r := range last {
		lines[i] = r.Line()
	}
	return curev1.AppendEvidence(msg, fmt.Sprintf("%s (last %d of %d lines naming %s)", curev1.EvidenceKernelLog, len(last), n, keys), lines)
}
