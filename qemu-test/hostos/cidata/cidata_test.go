package cidata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bootSector builds a FAT boot sector tools/fat accepts: jump, 512
// bytes/sector, 4 sectors/cluster, a 16-bit FAT size only on FAT16
// (tools/fat tests the parser itself; these feed FindByLabel).
func bootSector(fat32 bool, label string) []byte {
	bs := make([]byte, 512)
	bs[0], bs[1], bs[2] = 0xEB, 0x3C, 0x90
	bs[0x0B], bs[0x0C], bs[0x0D] = 0x00, 0x02, 4
	off := 38
	if fat32 {
		off = 66
	} else {
		bs[0x16] = 8
	}
	bs[off] = 0x29
	copy(bs[off+5:off+16], []byte(label + "           ")[:11])
	fs := "FAT16   "
	if fat32 {
		fs = "FAT32   "
	}
	copy(bs[off+16:], fs)
	bs[510], bs[511] = 0x55, 0xAA
	return bs
}

// fakeSys builds <root>/sys/block/<disk>/<part>/partition and device files
// under <root>/dev holding the given boot sectors.
func fakeSys(t *testing.T, devs map[string][]byte) (string, string) {
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	os.MkdirAll(dev, 0o755)
	for name, bs := range devs {
		disk, part, isPart := strings.Cut(name, "/")
		os.MkdirAll(filepath.Join(sys, "block", disk), 0o755)
		node := disk
		if isPart {
			os.MkdirAll(filepath.Join(sys, "block", disk, part), 0o755)
			os.WriteFile(filepath.Join(sys, "block", disk, part, "partition"), []byte("2\n"), 0o644)
			node = part
		}
		os.WriteFile(filepath.Join(dev, node), bs, 0o644)
	}
	return sys, dev
}

func TestFindByLabel(t *testing.T) {
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xAA
	sys, dev := fakeSys(t, map[string][]byte{
		"nvme0n1":           mbr,
		"nvme0n1/nvme0n1p1": bootSector(false, "CUREHOST"),
		"nvme0n1/nvme0n1p2": bootSector(false, "CIDATA"),
		"sda":               bootSector(true, "OTHER"),
	})
	got, err := FindByLabel(sys, dev, "cidata")
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dev, "nvme0n1p2") {
		t.Errorf("found %s", got)
	}
	if _, err := FindByLabel(sys, dev, "NOPE"); err == nil || !strings.Contains(err.Error(), "among 4 block devices") {
		t.Errorf("missing label: err = %v", err)
	}
}

func TestFindByLabelRefusesAmbiguity(t *testing.T) {
	sys, dev := fakeSys(t, map[string][]byte{
		"sda/sda1":          bootSector(false, "CIDATA"),
		"nvme0n1/nvme0n1p2": bootSector(true, "CIDATA"),
	})
	_, err := FindByLabel(sys, dev, "CIDATA")
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "sda1") || !strings.Contains(err.Error(), "nvme0n1p2") {
		t.Fatalf("err = %v, want both devices named", err)
	}
}

const metaYAML = "instance-id: node-7\nlocal-hostname: gpu-node-7\n"
const userYAML = `#cloud-config
hostname: gpu-node-7
phone_home:
  url: http://10.0.2.2:8080/hostready/node-7?token=s3cret
  post: all
  tries: 5
`

func TestParseSeed(t *testing.T) {
	s, err := ParseSeed("meta-data", []byte(metaYAML), "user-data", []byte(userYAML))
	if err != nil {
		t.Fatal(err)
	}
	if s.InstanceID != "node-7" || s.Hostname != "gpu-node-7" || s.PhoneHome.Tries != 5 || s.PhoneHome.Token() != "s3cret" {
		t.Errorf("seed = %+v token %q", s, s.PhoneHome.Token())
	}
}

func TestParseSeedErrors(t *testing.T) {
	cases := []struct{ md, ud, want string }{
		{"local-hostname: x\n", userYAML, "meta-data: instance-id: required"},
		{metaYAML, "hostname: x\n", "user-data: expected a #cloud-config document"},
		{metaYAML, "#cloud-config\nhostname: x\n", "user-data: phone_home.url: required"},
		{metaYAML, "#cloud-config\nphone_home: {url: 'ftp://x/y'}\n", "not an http(s) URL"},
		{"instance-id: [\n", userYAML, "meta-data: "},
	}
	for _, c := range cases {
		_, err := ParseSeed("meta-data", []byte(c.md), "user-data", []byte(c.ud))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	s, err := ParseSeed("meta-data", []byte(metaYAML), "user-data", []byte("#cloud-config\nphone_home: {url: 'http://h/x'}\n"))
	if err != nil || s.PhoneHome.Tries != 10 || s.Hostname != "gpu-node-7" {
		t.Errorf("defaults: %+v %v", s, err)
	}
}
