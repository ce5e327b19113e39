package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"gopkg.in/yaml.v3"
)

// Fleet is the YAML config: one virtual BMC (and VM) per node.
type Fleet struct {
	Listen   string `yaml:"listen"`   // host for every BMC, default 127.0.0.1
	BasePort int    `yaml:"basePort"` // node i listens on basePort+i unless it sets port
	TLS      bool   `yaml:"tls"`      // self-signed HTTPS, as real BMCs
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	BootURL  string `yaml:"bootURL"` // DHCP bootfile of nodes on QEMU's user network, e.g. http://10.0.2.2:8080/boot.ipxe
	WorkDir  string `yaml:"workDir"` // disks and console logs
	Fake     bool   `yaml:"fake"`    // in-memory machines instead of QEMU
	// OVMFCode and OVMFVars are the UEFI firmware of nodes with uefi: true
	// (default: Debian's ovmf package).
	OVMFCode string `yaml:"ovmfCode"`
	OVMFVars string `yaml:"ovmfVars"`
	// What -nodes-yaml writes besides the BMCs: every node's SKU (a node's
	// own sku wins), and the coordinator's environment variable holding the
	// BMC password (passwordEnv) instead of the password itself.
	SKU         string `yaml:"sku"`
	PasswordEnv string `yaml:"passwordEnv"`
	Nodes       []Node `yaml:"nodes"`
}

// Node is one machine behind one BMC. Empty fields get per-index defaults.
type Node struct {
	Name         string `yaml:"name"`
	Port         int    `yaml:"port"`
	MAC          string `yaml:"mac"`
	Serial       string `yaml:"serial"`
	UUID         string `yaml:"uuid"`
	Disk         string `yaml:"disk"`
	DiskSizeMiB  int64  `yaml:"diskSizeMiB"`
	MemoryMiB    int    `yaml:"memoryMiB"`
	NoBootMode   bool   `yaml:"noBootMode"`
	NoContinuous bool   `yaml:"noContinuous"`
	// Tap puts the node's NIC on this existing tap device (on a bridge with
	// the site's DHCP server and the coordinator) instead of QEMU's user
	// network; bootURL does not apply to it.
	Tap string `yaml:"tap"`
	// UEFI makes the node a UEFI server: OVMF firmware with its own NVRAM,
	// no NIC option ROM (the firmware's own PXE), and a BMC that offers
	// BootSourceOverrideMode UEFI (first) and Legacy.
	UEFI bool   `yaml:"uefi"`
	SKU  string `yaml:"sku"` // the node's SKU in -nodes-yaml (default: the fleet's)

	line int // where the node starts in the file, for errors
}

// loadFleet reads a fleet file strictly (unknown keys are errors).
func loadFleet(path string) (*Fleet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f Fleet
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Node lines, for errors about values the schema cannot check.
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err == nil && len(doc.Content) == 1 {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "nodes" {
				for j, n := range m.Content[i+1].Content {
					if j < len(f.Nodes) {
						f.Nodes[j].line = n.Line
					}
				}
			}
		}
	}
	if err := f.complete(path); err != nil {
		return nil, err
	}
	return &f, nil
}

// generatedFleet is n default nodes, for `vbmc -n 3`.
func generatedFleet(n int) *Fleet {
	f := &Fleet{}
	for range n {
		f.Nodes = append(f.Nodes, Node{})
	}
	return f
}

// complete fills defaults and validates; where names the source for errors.
func (f *Fleet) complete(where string) error {
	if f.Listen == "" {
		f.Listen = "127.0.0.1"
	}
	if f.BasePort == 0 {
		f.BasePort = 9001
	}
	if f.Username == "" {
		f.Username = "admin"
	}
	if f.Password == "" {
		f.Password = "password"
	}
	if f.WorkDir == "" {
		f.WorkDir = filepath.Join(os.TempDir(), "cure-vbmc")
	}
	if f.OVMFCode == "" {
		f.OVMFCode = "/usr/share/OVMF/OVMF_CODE.fd"
	}
	if f.OVMFVars == "" {
		f.OVMFVars = "/usr/share/OVMF/OVMF_VARS.fd"
	}
	if len(f.Nodes) == 0 {
		return fmt.Errorf("%s: nodes: at least one node is required", where)
	}
	names, ports, macs, taps := map[string]int{}, map[int]int{}, map[string]int{}, map[string]int{}
	for i := range f.Nodes {
		n := &f.Nodes[i]
		at := fmt.Sprintf("%s: nodes[%d]", where, i)
		if n.line > 0 {
			at = fmt.Sprintf("%s:%d: nodes[%d]", where, n.line, i)
		}
		if n.Name == "" {
			n.Name = fmt.Sprintf("node%d", i+1)
		}
		if n.Port == 0 {
			n.Port = f.BasePort + i
		}
		if n.MAC == "" {
			n.MAC = fmt.Sprintf("52:54:00:c0:00:%02x", i+1)
		}
		if n.Serial == "" {
			n.Serial = fmt.Sprintf("CURE-QEMU-%03d", i+1)
		}
		if n.UUID == "" {
			n.UUID = fmt.Sprintf("c0e00000-0000-4000-8000-%012x", i+1)
		}
		if n.Disk == "" {
			n.Disk = filepath.Join(f.WorkDir, n.Name, "disk.img")
		}
		if n.DiskSizeMiB == 0 {
			n.DiskSizeMiB = 4096
		}
		if n.MemoryMiB == 0 {
			n.MemoryMiB = 1024
		}
		if n.SKU == "" {
			n.SKU = f.SKU
		}
		hw, err := net.ParseMAC(n.MAC)
		if err != nil || len(hw) != 6 {
			return fmt.Errorf("%s (%s): mac %q is not a 48-bit MAC like 52:54:00:c0:00:01", at, n.Name, n.MAC)
		}
		if n.Port < 1 || n.Port > 65535 {
			return fmt.Errorf("%s (%s): port %d is out of range", at, n.Name, n.Port)
		}
		if n.MemoryMiB < 64 {
			return fmt.Errorf("%s (%s): memoryMiB %d is below 64", at, n.Name, n.MemoryMiB)
		}
		for what, seen := range map[string]bool{
			"name " + n.Name:     dup(names, n.Name, i),
			"mac " + hw.String(): dup(macs, hw.String(), i),
		} {
			if seen {
				return fmt.Errorf("%s: %s is used by another node", at, what)
			}
		}
		if j, ok := ports[n.Port]; ok {
			return fmt.Errorf("%s (%s): port %d is also nodes[%d]'s", at, n.Name, n.Port, j)
		}
		ports[n.Port] = i
		if n.Tap != "" {
			if j, ok := taps[n.Tap]; ok {
				return fmt.Errorf("%s (%s): tap %s is also nodes[%d]'s: one NIC per tap device", at, n.Name, n.Tap, j)
			}
			taps[n.Tap] = i
		}
		if !f.Fake && n.Tap == "" && f.BootURL == "" {
			return fmt.Errorf("%s (%s): bootURL is required for QEMU nodes on QEMU's user network (e.g. http://10.0.2.2:8080/boot.ipxe), or give the node a tap", at, n.Name)
		}
	}
	if f.PasswordEnv != "" && !envNameRE.MatchString(f.PasswordEnv) {
		return fmt.Errorf("%s: passwordEnv %q is not an environment variable name", where, f.PasswordEnv)
	}
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func dup(seen map[string]int, key string, i int) bool {
	if _, ok := seen[key]; ok {
		return true
	}
	seen[key] = i
	return false
}
