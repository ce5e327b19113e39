package firstboot

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/tools/testenv"
)

func testSeed() Seed {
	return Seed{
		InstanceID:    "run-42-node-7",
		Hostname:      "gpu-node-07",
		CallbackURL:   "http://10.0.2.2:8080/v1/host-ready/node-7",
		CallbackToken: "tok_AbC+123/=",
	}
}

const goldenUserData = `#cloud-config
hostname: gpu-node-07
phone_home:
  url: http://10.0.2.2:8080/v1/host-ready/node-7?token=tok_AbC%2B123%2F%3D
  post: all
  tries: 10
write_files:
  - path: /etc/cure/callback-token
    content: tok_AbC+123/=
    owner: root:root
    permissions: "0600"
`

func TestFilesGolden(t *testing.T) {
	files, err := testSeed().Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Errorf("files = %d, want 3", len(files))
	}
	if got := string(files["meta-data"]); got != "instance-id: run-42-node-7\nlocal-hostname: gpu-node-07\n" {
		t.Errorf("meta-data =\n%s", got)
	}
	if got := string(files["user-data"]); got != goldenUserData {
		t.Errorf("user-data =\n%s\nwant\n%s", got, goldenUserData)
	}
	if got := string(files["network-config"]); got != "version: 2\nethernets:\n  all-ethernet:\n    match:\n      name: e*\n    dhcp4: true\n" {
		t.Errorf("network-config =\n%s", got)
	}

	// Parsed back, the documents say what cloud-init will read.
	var ud struct {
		Hostname  string `yaml:"hostname"`
		PhoneHome struct {
			URL   string `yaml:"url"`
			Post  string `yaml:"post"`
			Tries int    `yaml:"tries"`
		} `yaml:"phone_home"`
		WriteFiles []map[string]string `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(files["user-data"], &ud); err != nil {
		t.Fatal(err)
	}
	if ud.Hostname != "gpu-node-07" || ud.PhoneHome.Post != "all" || ud.PhoneHome.Tries != 10 {
		t.Errorf("user-data parsed = %+v", ud)
	}
	if !strings.Contains(ud.PhoneHome.URL, "token=tok_AbC%2B123%2F%3D") {
		t.Errorf("phone_home url %q lacks the escaped token", ud.PhoneHome.URL)
	}
	want := map[string]string{"path": TokenPath, "content": "tok_AbC+123/=", "owner": "root:root", "permissions": "0600"}
	if len(ud.WriteFiles) != 1 || !reflect.DeepEqual(ud.WriteFiles[0], want) {
		t.Errorf("write_files = %v", ud.WriteFiles)
	}
	var nc map[string]any
	if err := yaml.Unmarshal(files["network-config"], &nc); err != nil {
		t.Fatal(err)
	}
	if nc["version"] != 2 {
		t.Errorf("network-config version = %v", nc["version"])
	}
}

func TestPhoneHomeURLKeepsExistingQuery(t *testing.T) {
	s := testSeed()
	s.CallbackURL = "https://coord.example:8443/ready?node=n7"
	got, err := s.PhoneHomeURL()
	if err != nil {
		t.Fatal(err)
	}
	if got != "https://coord.example:8443/ready?node=n7&token=tok_AbC%2B123%2F%3D" {
		t.Errorf("url = %s", got)
	}
}

func TestExtraUserData(t *testing.T) {
	s := testSeed()
	s.ExtraUserData = "#cloud-config\npackages: [htop]\nruncmd:\n  - [sh, -c, 'echo hi']\n"
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	ud := string(files["user-data"])
	if !strings.HasPrefix(ud, goldenUserData) || strings.Count(ud, "#cloud-config") != 1 {
		t.Errorf("user-data =\n%s", ud)
	}
	var m map[string]any
	if err := yaml.Unmarshal(files["user-data"], &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m["packages"], []any{"htop"}) || len(m["runcmd"].([]any)) != 1 || m["hostname"] != "gpu-node-07" {
		t.Errorf("merged = %v", m)
	}

	for extra, wantErr := range map[string]string{
		"packages: [a]\nhostname: other\n": `extra user-data line 2: key "hostname" conflicts with the generated user-data (which sets hostname, phone_home, write_files)`,
		"write_files:\n  - path: /x\n":     `key "write_files" conflicts`,
		"a: 1\nb: 2\na: 3\n":               `extra user-data line 3: key "a" repeats line 1`,
		"- just\n- a list\n":               "extra user-data line 1: expected a mapping",
		"#!/bin/sh\necho hi\n":             "expected a mapping",
		"packages: [unclosed\n":            "first-boot seed: extra user-data: yaml:",
	} {
		s.ExtraUserData = extra
		if _, err := s.Files(); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("extra %q: err = %v, want containing %q", extra, err, wantErr)
		}
	}
	s.ExtraUserData = "#cloud-config\n# nothing else\n"
	if _, err := s.Files(); err != nil {
		t.Errorf("comment-only extra: %v", err)
	}
}

func TestSeedValidation(t *testing.T) {
	for _, tc := range []struct {
		mut     func(*Seed)
		wantErr string
	}{
		{func(s *Seed) { s.InstanceID = "" }, "instance id"},
		{func(s *Seed) { s.Hostname = "bad_host" }, `hostname "bad_host"`},
		{func(s *Seed) { s.Hostname = "-x" }, "hostname"},
		{func(s *Seed) { s.CallbackURL = "/relative" }, "expected an absolute http(s) URL"},
		{func(s *Seed) { s.CallbackToken = "" }, "callback token"},
		{func(s *Seed) { s.CallbackToken = "a b" }, "callback token"},
	} {
		s := testSeed()
		tc.mut(&s)
		if _, err := s.Files(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("err = %v, want containing %q", err, tc.wantErr)
		}
	}
}

// bootSector builds a minimal FAT boot sector by the spec's offsets
// (tools/fat tests the parser itself; these feed FindSeedPartition).
func bootSector(fat32 bool, sig byte, label string) []byte {
	b := make([]byte, 512)
	b[0], b[1], b[2] = 0xEB, 0x3C, 0x90
	copy(b[3:], "mkfs.fat")
	binary.LittleEndian.PutUint16(b[0x0B:], 512)
	b[0x0D] = 4
	lbl := []byte(label + strings.Repeat(" ", 11-len(label)))
	if fat32 {
		binary.LittleEndian.PutUint16(b[0x16:], 0)
		binary.LittleEndian.PutUint32(b[0x24:], 1009)
		b[0x42] = sig
		copy(b[0x47:], lbl)
		copy(b[0x52:], "FAT32   ")
	} else {
		binary.LittleEndian.PutUint16(b[0x16:], 8)
		b[0x26] = sig
		copy(b[0x2B:], lbl)
		copy(b[0x36:], "FAT16   ")
	}
	b[510], b[511] = 0x55, 0xAA
	return b
}

// fixture makes sysRoot/sys/block/<disk>/<part>/partition and devRoot/<part>
// files holding the given first sectors.
func fixture(t *testing.T, disk string, sectors map[string][]byte) (sysRoot, devRoot string) {
	t.Helper()
	sysRoot, devRoot = t.TempDir(), t.TempDir()
	i := 0
	for _, name := range keys(sectors) {
		i++
		d := filepath.Join(sysRoot, "sys/block", disk, name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "partition"), []byte(strings.TrimPrefix(name, disk+"p")+"\n"), 0o644)
		os.WriteFile(filepath.Join(devRoot, name), sectors[name], 0o644)
	}
	os.MkdirAll(filepath.Join(sysRoot, "sys/block", disk, "queue"), 0o755)
	return sysRoot, devRoot
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestFindSeedPartition(t *testing.T) {
	sys, dev := fixture(t, "nvme0n1", map[string][]byte{
		"nvme0n1p1": bootSector(true, 0x29, "EFI"),
		"nvme0n1p2": make([]byte, 4096), // ext4 or anything else
		"nvme0n1p3": bootSector(false, 0x29, "cidata"),
	})
	got, err := FindSeedPartition(sys, dev, "/dev/nvme0n1")
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dev, "nvme0n1p3") {
		t.Errorf("got %s", got)
	}

	sys, dev = fixture(t, "vda", map[string][]byte{"vdap1": bootSector(true, 0x29, "EFI"), "vdap2": {1, 2}})
	_, err = FindSeedPartition(sys, dev, "vda")
	if err == nil || !strings.Contains(err.Error(), `no partition of vda has FAT label CIDATA (vdap1: FAT label "EFI"; vdap2: read boot sector`) {
		t.Errorf("none: %v", err)
	}

	sys, dev = fixture(t, "sda", map[string][]byte{"sdap1": bootSector(false, 0x29, "CIDATA"), "sdap2": bootSector(true, 0x29, "CIDATA")})
	_, err = FindSeedPartition(sys, dev, "sda")
	if err == nil || !strings.Contains(err.Error(), "sda has several CIDATA partitions") {
		t.Errorf("several: %v", err)
	}

	sys, dev = fixture(t, "sdb", nil)
	if _, err := FindSeedPartition(sys, dev, "sdb"); err == nil || !strings.Contains(err.Error(), "has no partitions") {
		t.Errorf("no partitions: %v", err)
	}
	if _, err := FindSeedPartition(sys, dev, "../etc"); err == nil {
		t.Error("path-like disk name accepted")
	}
}

// dirMounter "mounts" by recording the call; files land in the directory
// itself, and Unmount snapshots them as the partition's contents.
type dirMounter struct {
	mounted  map[string]string
	contents map[string]string
	failOn   string
	calls    []string
}

func (m *dirMounter) Mount(dev, dir, fstype string) error {
	m.calls = append(m.calls, "mount "+dev+" "+fstype)
	if m.failOn == "mount" {
		return errors.New("mount: no such device")
	}
	m.mounted = map[string]string{dir: dev}
	return nil
}

func (m *dirMounter) Unmount(dir string) error {
	m.calls = append(m.calls, "unmount")
	if _, ok := m.mounted[dir]; !ok {
		return errors.New("not mounted")
	}
	m.contents = map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		m.contents[e.Name()] = string(b)
		os.Remove(filepath.Join(dir, e.Name())) // the files live on the partition, not under the mount point
	}
	return nil
}

func TestWriteSeed(t *testing.T) {
	tmp := t.TempDir()
	m := &dirMounter{}
	if err := WriteSeed("/dev/nvme0n1p3", testSeed(), m, tmp); err != nil {
		t.Fatal(err)
	}
	want, _ := testSeed().Files()
	if len(m.contents) != 3 {
		t.Fatalf("partition holds %v", m.contents)
	}
	for name, b := range want {
		if m.contents[name] != string(b) {
			t.Errorf("%s =\n%s\nwant\n%s", name, m.contents[name], b)
		}
	}
	if strings.Join(m.calls, ",") != "mount /dev/nvme0n1p3 vfat,unmount" {
		t.Errorf("calls = %v", m.calls)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("mount point left behind: %v", entries)
	}

	// Invalid seed: nothing is mounted.
	m = &dirMounter{}
	bad := testSeed()
	bad.Hostname = ""
	if err := WriteSeed("/dev/x", bad, m, tmp); err == nil || len(m.calls) != 0 {
		t.Errorf("invalid seed: err %v, calls %v", err, m.calls)
	}
	m = &dirMounter{failOn: "mount"}
	if err := WriteSeed("/dev/x", testSeed(), m, tmp); err == nil || !strings.Contains(err.Error(), "write seed to /dev/x: mount: no such device") {
		t.Errorf("mount failure: %v", err)
	}
}

// TestWriteSeedLoop mounts a real vfat image through a loop device when
// the machine allows it (root, loop devices, dosfstools, mtools).
func TestWriteSeedLoop(t *testing.T) {
	testenv.RequireRoot(t, "losetup and mount")
	for _, tool := range []string{"losetup", "mkfs.vfat", "mtype"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "cidata.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 8<<20)
	if out, err := exec.Command("mkfs.vfat", "-n", "CIDATA", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v\n%s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device available: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "--detach", loop).Run()

	if err := WriteSeed(loop, testSeed(), SyscallMounter{}, t.TempDir()); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV) {
			t.Skipf("vfat mount unavailable here (container without the vfat module or mount rights): %v", err)
		}
		t.Fatal(err)
	}
	exec.Command("losetup", "--detach", loop).Run()
	// Read back with mtools, independent of the kernel's vfat driver.
	got, err := exec.Command("mtype", "-i", img, "::user-data").Output()
	if err != nil {
		t.Fatalf("mtype: %v", err)
	}
	if string(got) != goldenUserData {
		t.Errorf("user-data on the partition =\n%s", got)
	}
}
