package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/nodes"
)

func writeFleet(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFleetDefaults(t *testing.T) {
	p := writeFleet(t, `
bootURL: http://10.0.2.2:8080/boot.ipxe
basePort: 9100
nodes:
  - name: a
  - name: b
    mac: 52:54:00:00:00:99
    noContinuous: true
`)
	f, err := loadFleet(p)
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Nodes[0], f.Nodes[1]
	if a.Port != 9100 || b.Port != 9101 || a.MAC != "52:54:00:c0:00:01" || b.MAC != "52:54:00:00:00:99" || !b.NoContinuous {
		t.Fatalf("nodes = %+v", f.Nodes)
	}
	if a.MemoryMiB != 1024 || a.Serial == b.Serial || a.UUID == b.UUID {
		t.Fatalf("defaults: %+v", f.Nodes)
	}
}

func TestLoadFleetErrors(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"unknown key": {"bootURL: x\nnodes:\n  - name: a\n    macc: 1\n", "macc"},
		"bad mac":     {"bootURL: x\nnodes:\n  - name: a\n  - name: b\n    mac: zz\n", ":4: nodes[1] (b): mac"},
		"dup port":    {"bootURL: x\nnodes:\n  - {name: a, port: 9000}\n  - {name: b, port: 9000}\n", "port 9000 is also nodes[0]"},
		"dup name":    {"bootURL: x\nnodes:\n  - name: a\n  - name: a\n", "name a is used by another node"},
		"no bootURL":  {"nodes:\n  - name: a\n", "bootURL is required"},
		"dup tap":     {"nodes:\n  - {name: a, tap: tap0}\n  - {name: b, tap: tap0}\n", "tap tap0 is also nodes[0]'s"},
		"bad env":     {"passwordEnv: BMC-PW\nnodes:\n  - {name: a, tap: tap0}\n", "passwordEnv \"BMC-PW\""},
		"no nodes":    {"bootURL: x\n", "at least one node"},
	} {
		_, err := loadFleet(writeFleet(t, c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestEnsureDiskIsSparseAndKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "n1", "disk.img")
	if err := ensureDisk(p, 16); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Size() != 16<<20 {
		t.Fatalf("disk: %v %v", st, err)
	}
	if err := os.WriteFile(p, []byte("installed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ensureDisk(p, 16); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "installed" {
		t.Fatal("ensureDisk overwrote an existing disk")
	}
}

// A node on a tap device with UEFI firmware, as docs/SITE.md's walk
// writes it: no bootURL needed (the site's DHCP and the proxy answer on the
// tap's bridge), Debian's OVMF by default, the SKU and the password's
// environment variable carried into -nodes-yaml.
func TestLoadFleetTapUEFI(t *testing.T) {
	p := writeFleet(t, `
tls: true
sku: qemu-nvme
passwordEnv: BMC_PW
nodes:
  - name: node1
    mac: 52:54:00:c0:de:01
    tap: tap0
    uefi: true
`)
	f, err := loadFleet(p)
	if err != nil {
		t.Fatal(err)
	}
	n := f.Nodes[0]
	if n.Tap != "tap0" || !n.UEFI || n.SKU != "qemu-nvme" || f.OVMFCode != "/usr/share/OVMF/OVMF_CODE.fd" || f.OVMFVars != "/usr/share/OVMF/OVMF_VARS.fd" {
		t.Fatalf("fleet %+v node %+v", f, n)
	}
	y := string(nodesYAML([]entry{{Name: n.Name, URL: "https://127.0.0.1:9001", Fingerprint: "sha256:" + strings.Repeat("ab", 32), MAC: n.MAC, Serial: n.Serial,
		Username: "admin", Password: "password", SKU: n.SKU, PasswordEnv: f.PasswordEnv}}))
	if !strings.Contains(y, "passwordEnv: BMC_PW") || strings.Contains(y, "password:") || !strings.Contains(y, "sku: qemu-nvme") {
		t.Errorf("nodes yaml:\n%s", y)
	}
	t.Setenv("BMC_PW", "password")
	ns, err := nodes.ParseYAML("nodes.yaml", []byte(y))
	if err != nil || ns[0].BMCPasswordRef != "env:BMC_PW" || ns[0].SKU != "qemu-nvme" {
		t.Errorf("the coordinator reads it as %+v, %v", ns, err)
	}
}
