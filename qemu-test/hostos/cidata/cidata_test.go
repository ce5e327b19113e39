package cidata

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func bootSector(fat32 bool, label string) []byte {
	bs := make([]byte, 512)
	off := 38
	if fat32 {
		off = 66
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

func TestFATLabel(t *testing.T) {
	if got := FATLabel(bootSector(false, "CIDATA")); got != "CIDATA" {
		t.Errorf("FAT16 label = %q", got)
	}
	if got := FATLabel(bootSector(true, "cidata")); got != "cidata" {
		t.Errorf("FAT32 label = %q", got)
	}
	bad := bootSector(false, "CIDATA")
	bad[511] = 0
	if got := FATLabel(bad); got != "" {
		t.Errorf("no signature: label = %q", got)
	}
	if got := FATLabel(make([]byte, 100)); got != "" {
		t.Errorf("short: label = %q", got)
	}
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

// TestFindByLabelRealMkfs checks the parser against mkfs.vfat's output.
func TestFindByLabelRealMkfs(t *testing.T) {
	if _, err := exec.LookPath("mkfs.vfat"); err != nil {
		t.Skip("mkfs.vfat not installed")
	}
	img := filepath.Join(t.TempDir(), "p")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 8<<20)
	if out, err := exec.Command("mkfs.vfat", "-n", "CIDATA", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v: %s", err, out)
	}
	bs, _ := os.ReadFile(img)
	if got := FATLabel(bs[:512]); got != "CIDATA" {
		t.Errorf("label of mkfs.vfat image = %q", got)
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
