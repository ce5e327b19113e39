package phases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/mdraid"
)

// raidManifest is the QEMU SKU with its targetDisk replaced by storage.
func raidManifest(t *testing.T, storage string) []byte {
	t.Helper()
	s := string(manifest(t))
	const target = "    targetDisk:\n      transport: nvme\n      model: \"QEMU NVMe Ctrl\"\n"
	if !strings.Contains(s, target) {
		t.Fatal("qemu-nvme.yaml no longer has the targetDisk this test replaces")
	}
	return []byte(strings.Replace(s, target, storage, 1))
}

const raid1Storage = `    storage:
      raid:
        level: raid1
        members: [{serial: SN-A}, {serial: SN-B}]
      filesystems:
        - {type: xfs, label: scratch, mount: /scratch, disk: {serial: SN-C}}
        - {type: ext4, label: data, mount: /data, array: true}
`

// fixtureDisks lists drives from a sysfs fixture through blockdev.List,
// as the runner does on a node: three NVMe drives and the boot medium.
func fixtureDisks(t *testing.T, extra ...string) []blockdev.Disk {
	t.Helper()
	root := t.TempDir()
	put := func(p, v string) {
		p = filepath.Join(root, "sys/block", p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, serial := range append([]string{"SN-A", "SN-B", "SN-C"}, extra...) {
		n := fmt.Sprintf("nvme%dn1", i)
		put(n+"/size", "2097152")
		put(n+"/device/serial", serial)
		put(n+"/device/model", "QEMU NVMe Ctrl")
	}
	put("sda/size", "2097152")
	ds, err := blockdev.List(root)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		ds[i].BootMedium = ds[i].Name == "sda"
	}
	return ds
}

func planStorage(t *testing.T, storage string, ds []blockdev.Disk) (*InstallPlan, error) {
	t.Helper()
	doc, err := manifests.Parse("sku.yaml", raidManifest(t, storage))
	if err != nil {
		t.Fatal(err)
	}
	return PlanInstall(assignment(t, curev1.Mode_MODE_PROVISION, nil), doc.SKU, ds, "SN1")
}

func TestPlanStorage(t *testing.T) {
	p, err := planStorage(t, raid1Storage, fixtureDisks(t))
	if err != nil {
		t.Fatal(err)
	}
	st := p.Storage
	if st.Level != "raid1" || len(st.Members) != 2 || st.Members[0].Name != "nvme0n1" || st.Members[1].Name != "nvme1n1" {
		t.Errorf("members %+v", st.Members)
	}
	if len(st.Filesystems) != 2 || st.Filesystems[0].Device.Name != "nvme2n1" || !st.Filesystems[1].Array || st.Filesystems[1].Device.Name != "" {
		t.Errorf("filesystems %+v", st.Filesystems)
	}
	if p.Target.Path != "" {
		t.Errorf("target %q chosen before the array exists", p.Target.Path)
	}
	if !strings.Contains(p.Seed.ExtraUserData, `- ["LABEL=data", "/data", "ext4", "defaults,nofail", "0", "2"]`) ||
		!strings.HasPrefix(p.Seed.ExtraUserData, "#cloud-config\n") {
		t.Errorf("seed user data:\n%s", p.Seed.ExtraUserData)
	}
}

func TestPlanStorageRefuses(t *testing.T) {
	raid := func(members string) string {
		return "    storage:\n      raid:\n        level: raid1\n        members: " + members + "\n"
	}
	withFS := func(target string) string {
		return "    targetDisk: {" + target + "}\n    storage:\n      filesystems:\n        - {type: ext4, label: d, mount: /d, disk: {serial: SN-A}}\n"
	}
	for name, c := range map[string]struct {
		storage string
		disks   []blockdev.Disk
		want    string
	}{
		"ambiguous member": {raid("[{serial: SN-A}, {transport: nvme}]"), nil, "members[1] {transport=nvme}: disk selector {transport=nvme} is ambiguous: matches nvme0n1, nvme1n1, nvme2n1"},
		"missing member":   {raid("[{serial: SN-A}, {serial: SN-X}]"), nil, `members[1] {serial="SN-X"}: no disk matches`},
		"same drive twice": {raid("[{serial: SN-A}, {name: nvme0n1}]"), nil, "members[1] {name=nvme0n1} selects nvme0n1, which spec.os.storage.raid.members[0] already names"},
		"boot medium":      {raid("[{serial: SN-A}, {name: sda}]"), nil, "excluded: sda (boot medium)"},
		"member is fs disk": {raid("[{serial: SN-A}, {serial: SN-B}]") + "      filesystems:\n        - {type: ext4, label: d, mount: /d, disk: {name: nvme1n1}}\n", nil,
			"filesystems[0].disk {name=nvme1n1} selects nvme1n1, which spec.os.storage.raid.members[1] already names"},
		"fs on the target": {withFS("serial: SN-A"), nil, "selects nvme0n1, which spec.os.targetDisk already names"},
		"in use":           {raid("[{serial: SN-A}, {serial: SN-B}]"), inUse(t), "selects nvme1n1, in use by md127"},
	} {
		ds := c.disks
		if ds == nil {
			ds = fixtureDisks(t)
		}
		if _, err := planStorage(t, c.storage, ds); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v\nwant ...%s...", name, err, c.want)
		}
	}
	// The SKU's own userData may not set the mounts the filesystems need.
	y := strings.Replace(string(raidManifest(t, raid1Storage)), `      hostname: "{{.NodeID}}"`,
		"      hostname: \"{{.NodeID}}\"\n      userData: \"#cloud-config\\nmounts: []\\n\"", 1)
	doc, err := manifests.Parse("sku.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanInstall(assignment(t, curev1.Mode_MODE_PROVISION, nil), doc.SKU, fixtureDisks(t), "SN1"); err == nil || !strings.Contains(err.Error(), "userData sets mounts") {
		t.Errorf("userData with mounts: %v", err)
	}
}

func inUse(t *testing.T) []blockdev.Disk {
	ds := fixtureDisks(t)
	ds[1].Holders = []string{"md127"}
	return ds
}

// fakeStorage records the storage programs os_install runs and answers
// like a node where mdadm made /dev/md127.
type fakeStorage struct {
	runs    []string
	modules []string
	sbs     map[string]*mdraid.Superblock
	runErr  map[string]error
}

func (f *fakeStorage) seams() StorageSeams {
	return StorageSeams{
		Run: func(_ context.Context, name string, args ...string) ([]byte, []byte, error) {
			f.runs = append(f.runs, name+" "+strings.Join(args, " "))
			return nil, []byte("stderr of " + name), f.runErr[name]
		},
		LoadModule: func(name string) error { f.modules = append(f.modules, name); return nil },
		Examine: func(path string) (*mdraid.Superblock, error) {
			if sb, ok := f.sbs[path]; ok {
				return sb, nil
			}
			return nil, mdraid.ErrNoSuperblock
		},
		FSLabel: func(path string) (string, string, error) {
			switch path {
			case "/dev/nvme2n1":
				return "xfs", "scratch", nil
			case "/dev/md127p3":
				return "ext4", "data", nil
			}
			return "", "", blockdev.ErrNoFilesystem
		},
		Resolve: func(path string) (string, error) {
			switch path {
			case arrayDevice:
				return "/dev/md127", nil
			case "/dev/md127p3":
				return path, nil
			}
			return "", os.ErrNotExist
		},
		AddPartition: func(path, name string) (int, error) {
			f.runs = append(f.runs, "addpart "+path+" "+name)
			return 3, nil
		},
	}
}

func goodMembers() map[string]*mdraid.Superblock {
	sb := func(dev uint32) *mdraid.Superblock {
		return &mdraid.Superblock{Version: "1.0", ArrayUUID: [16]byte{1, 2, 3}, Level: 1, RaidDisks: 2, DevNumber: dev,
			Events: 9, ResyncOffset: 0, Roles: []uint16{0, 1}}
	}
	return map[string]*mdraid.Superblock{"/dev/nvme0n1": sb(0), "/dev/nvme1n1": sb(1)}
}

func raidExecutor(t *testing.T, fs *fakeStorage, img *fakeImages, seeds *fakeSeeds) *Executor {
	t.Helper()
	ds := fixtureDisks(t)
	return New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return ds, nil }, Images: img, Seeds: seeds,
		Storage: fs.seams(), SystemSerial: "SN1"})
}

func TestOSInstallRAID1(t *testing.T) {
	fs := &fakeStorage{sbs: goodMembers()}
	img, seeds, em := &fakeImages{}, &fakeSeeds{}, &recEmitter{}
	e := raidExecutor(t, fs, img, seeds)
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, raidManifest(t, raid1Storage)), em)
	if out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Fatalf("outcome %+v", out)
	}
	want := []string{
		"mdadm --create /dev/md/cure-os --run --metadata=1.0 --homehost=any --name=cure-os --level=raid1 --raid-devices=2 /dev/nvme0n1 /dev/nvme1n1",
		"mkfs.xfs -q -f -L scratch /dev/nvme2n1",
		"addpart /dev/md127 data",
		"mkfs.ext4 -q -F -t ext4 -L data /dev/md127p3",
	}
	if strings.Join(fs.runs, "\n") != strings.Join(want, "\n") {
		t.Errorf("ran:\n%s\nwant:\n%s", strings.Join(fs.runs, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(fs.modules, ",") != "md_mod,raid1" {
		t.Errorf("modules %v", fs.modules)
	}
	if len(img.writes) != 1 || img.writes[0].Target != "/dev/md127" || img.writes[0].TargetZeroed ||
		len(img.verified) != 1 || !strings.HasPrefix(img.verified[0], "/dev/md127|") {
		t.Errorf("image written to %+v, verified %v", img.writes, img.verified)
	}
	if len(seeds.found) != 1 || seeds.found[0] != "md127" || !strings.Contains(seeds.seeds[0].ExtraUserData, "LABEL=scratch") {
		t.Errorf("seed on %v: %+v", seeds.found, seeds.seeds)
	}
	var got []string
	for _, v := range em.verdicts {
		got = append(got, v.Component+" "+v.Status.String()+" "+v.Observed)
	}
	all := strings.Join(got, "\n")
	for _, w := range []string{
		"filesystem/scratch PASS xfs LABEL=scratch on /dev/nvme2n1",
		"filesystem/data PASS ext4 LABEL=data on /dev/md127p3",
		"md/cure-os PASS raid1 /dev/md127 (metadata 1.0, uuid 01020300:00000000:00000000:00000000): nvme0n1 slot 0, nvme1n1 slot 1; resyncing in the background",
		"disk/md127 PASS sha256:",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("verdicts lack %q:\n%s", w, all)
		}
	}
}

func TestOSInstallRAIDFailures(t *testing.T) {
	bad := goodMembers()
	bad["/dev/nvme1n1"].ArrayUUID[0] = 9
	for name, c := range map[string]struct {
		fs   *fakeStorage
		want string
	}{
		"mdadm fails":     {&fakeStorage{sbs: goodMembers(), runErr: map[string]error{"mdadm": errors.New("exit status 1")}}, "exit status 1: stderr of mdadm"},
		"mkfs fails":      {&fakeStorage{sbs: goodMembers(), runErr: map[string]error{"mkfs.xfs": errors.New("exit status 1")}}, "mkfs.xfs /dev/nvme2n1: exit status 1"},
		"member mismatch": {&fakeStorage{sbs: bad}, "md member superblocks: /dev/nvme1n1: array 09020300"},
		"no superblock":   {&fakeStorage{sbs: map[string]*mdraid.Superblock{}}, "md member nvme0n1: no md superblock"},
	} {
		em := &recEmitter{}
		e := raidExecutor(t, c.fs, &fakeImages{}, &fakeSeeds{})
		out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, raidManifest(t, raid1Storage)), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, c.want) {
			t.Errorf("%s: outcome %+v\nwant ...%s...", name, out, c.want)
		}
	}
}

// TestOSInstallStorageRefused: outside provision nothing runs, not even
// disk listing; a runner without storage tools refuses before writing.
func TestOSInstallStorageRefused(t *testing.T) {
	for _, m := range []curev1.Mode{curev1.Mode_MODE_AUDIT, curev1.Mode_MODE_VERIFY, curev1.Mode_MODE_DIAGNOSTIC, curev1.Mode_MODE_BURNIN, curev1.Mode_MODE_WIPE, curev1.Mode_MODE_SERVICE} {
		fs, img := &fakeStorage{sbs: goodMembers()}, &fakeImages{}
		e := raidExecutor(t, fs, img, &fakeSeeds{})
		out := e.Run(context.Background(), "os_install", assignment(t, m, raidManifest(t, raid1Storage)), &recEmitter{})
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "refused") || len(fs.runs)+len(fs.modules)+len(img.writes) != 0 {
			t.Errorf("%v: outcome %+v, ran %v, writes %d", m, out, fs.runs, len(img.writes))
		}
	}
	img := &fakeImages{}
	ds := fixtureDisks(t)
	e := New(Config{Log: quiet(), Disks: func() ([]blockdev.Disk, error) { return ds, nil }, Images: img, Seeds: &fakeSeeds{}})
	out := e.Run(context.Background(), "os_install", assignment(t, curev1.Mode_MODE_PROVISION, raidManifest(t, raid1Storage)), &recEmitter{})
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "no storage tools") || len(img.writes) != 0 {
		t.Errorf("no storage tools: %+v, writes %d", out, len(img.writes))
	}
}
