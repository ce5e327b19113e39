package phases

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/mdraid"
	"gopkg.in/yaml.v3"
)

// StorageSeams are what spec.os.storage needs from the node. A nil Run
// refuses a SKU with storage before any disk is touched.
type StorageSeams struct {
	// Run runs mdadm, mkfs.ext4 or mkfs.xfs (from the image's PATH or
	// the pinned tool bundle: optools.OnDemand.Run) to its end.
	Run func(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error)
	// LoadModule loads a kernel module and its dependencies (md_mod,
	// raid1, raid10 have no modalias: nothing loads them at boot).
	LoadModule func(name string) error
	// Examine reads a member's md superblock (mdraid.Examine).
	Examine func(path string) (*mdraid.Superblock, error)
	// FSLabel reads a filesystem's type and label (blockdev.FSLabelOf).
	FSLabel func(path string) (fstype, label string, err error)
	// Resolve follows /dev/md/NAME to /dev/mdN (filepath.EvalSymlinks);
	// an error means the node is not there (yet).
	Resolve func(path string) (string, error)
	// AddPartition adds a partition named name over the free space after
	// the last one of the GPT at path, returning its number
	// (gpt.AddPartitionDevice).
	AddPartition func(path, name string) (int, error)
}

// The array os_install creates: its name in the superblock and the node
// mdadm makes for it.
const (
	ArrayName   = "cure-os"
	arrayDevice = "/dev/md/" + ArrayName
)

// StoragePlan is spec.os.storage resolved against the node's drives.
type StoragePlan struct {
	Level       string          // "" without an array
	Members     []blockdev.Disk // in manifest order: slot i is members[i]
	Filesystems []FSPlan
}

// FSPlan is one extra filesystem and where it goes.
type FSPlan struct {
	manifests.Filesystem
	// Device is the whole drive; zero for the array's remaining space.
	Device blockdev.Disk
}

// PlanStorage resolves st against disks: each member and filesystem drive
// selector must match exactly one safe drive (blockdev.Select), no drive
// may be named twice, nor be target (the one-disk install's target), nor
// be in use by a stacked device. It is pure: nothing is touched.
func PlanStorage(st *manifests.Storage, disks []blockdev.Disk, target *blockdev.Disk) (*StoragePlan, error) {
	p := &StoragePlan{}
	used := map[string]string{}
	if target != nil {
		used[target.Name] = "spec.os.targetDisk"
	}
	take := func(field string, ds manifests.DiskSelector) (blockdev.Disk, error) {
		sel := selector(ds)
		d, err := blockdev.Select(disks, sel)
		if err != nil {
			return d, fmt.Errorf("%s %s: %w", field, sel, err)
		}
		if other, dup := used[d.Name]; dup {
			return d, fmt.Errorf("%s %s selects %s, which %s already names: refusing to guess", field, sel, d.Name, other)
		}
		if len(d.Holders) > 0 {
			return d, fmt.Errorf("%s %s selects %s, in use by %s: refusing", field, sel, d.Name, strings.Join(d.Holders, ", "))
		}
		used[d.Name] = field
		return d, nil
	}
	if r := st.RAID; r != nil {
		if min := manifests.RAIDMinMembers(r.Level); min == 0 || len(r.Members) < min {
			return nil, fmt.Errorf("spec.os.storage.raid: %s over %d members: needs a known level and at least %d", r.Level, len(r.Members), min)
		}
		p.Level = r.Level
		for i, m := range r.Members {
			d, err := take(fmt.Sprintf("spec.os.storage.raid.members[%d]", i), m)
			if err != nil {
				return nil, err
			}
			p.Members = append(p.Members, d)
		}
	}
	for i, fs := range st.Filesystems {
		fp := FSPlan{Filesystem: fs}
		switch {
		case fs.Disk != nil:
			d, err := take(fmt.Sprintf("spec.os.storage.filesystems[%d].disk", i), *fs.Disk)
			if err != nil {
				return nil, err
			}
			fp.Device = d
		case st.RAID == nil:
			return nil, fmt.Errorf("spec.os.storage.filesystems[%d]: array: true without spec.os.storage.raid", i)
		}
		p.Filesystems = append(p.Filesystems, fp)
	}
	return p, nil
}

func selector(ts manifests.DiskSelector) blockdev.Selector {
	return blockdev.Selector{Transport: ts.Transport, Model: ts.Model, Serial: ts.Serial, Name: ts.Name,
		MinSize: uint64(ts.MinSize), MaxSize: uint64(ts.MaxSize)}
}

// mountsUserData adds a cloud-config mounts entry per filesystem (by
// label, nofail: a missing data drive must not stop the OS from booting)
// to the SKU's userData, refusing one that sets mounts itself.
func mountsUserData(userData string, fss []FSPlan) (string, error) {
	if len(fss) == 0 {
		return userData, nil
	}
	if userData != "" {
		var top map[string]any
		if err := yaml.Unmarshal([]byte(userData), &top); err != nil {
			return "", fmt.Errorf("spec.os.firstBoot.userData: %w", err)
		}
		if _, ok := top["mounts"]; ok {
			return "", fmt.Errorf("spec.os.firstBoot.userData sets mounts, and spec.os.storage.filesystems needs them: put the mounts in one place")
		}
	}
	var b strings.Builder
	if userData == "" {
		b.WriteString("#cloud-config\n")
	} else {
		b.WriteString(strings.TrimRight(userData, "\n") + "\n")
	}
	b.WriteString("mounts:\n")
	for _, fs := range fss {
		pass := "2"
		if fs.Type == manifests.FSXFS {
			pass = "0" // xfs is checked at mount, never by fsck at boot
		}
		fmt.Fprintf(&b, "  - [\"LABEL=%s\", %q, %q, \"defaults,nofail\", \"0\", %q]\n", fs.Label, fs.Mount, fs.Type, pass)
	}
	return b.String(), nil
}

// createArray loads md and creates the array over the members, returning
// the array as the install target. Members this boot's erase left zeroed
// are identical already: --assume-clean spares the resync, and the image
// may skip zero blocks on the array.
func (e *Executor) createArray(ctx context.Context, emit agent.Emitter, p *StoragePlan) (blockdev.Disk, bool, error) {
	s := e.cfg.Storage
	for _, m := range []string{"md_mod", p.Level} {
		if s.LoadModule == nil {
			break
		}
		if err := s.LoadModule(m); err != nil {
			// A kernel with md built in has no module to load; mdadm
			// says so below if md is really missing.
			e.cfg.Log.Warn("loading md module", "module", m, "err", err)
		}
	}
	zeroed := true
	var paths, names []string
	for _, m := range p.Members {
		zeroed = zeroed && e.isZeroed(m)
		paths, names = append(paths, m.Path), append(names, m.Name)
	}
	args, err := mdraid.CreateArgs(arrayDevice, ArrayName, p.Level, paths, zeroed)
	if err != nil {
		return blockdev.Disk{}, false, err
	}
	emit.Log("INFO", "creating md array", map[string]string{"level": p.Level, "members": strings.Join(names, ","), "assume_clean": fmt.Sprint(zeroed)})
	if _, stderr, err := s.Run(ctx, "mdadm", args...); err != nil {
		return blockdev.Disk{}, false, fmt.Errorf("mdadm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(stderr)))
	}
	dev, err := e.waitDevice(ctx, arrayDevice)
	if err != nil {
		return blockdev.Disk{}, false, err
	}
	return blockdev.Disk{Name: filepath.Base(dev), Path: dev, Transport: "md"}, zeroed, nil
}

// waitDevice polls: device nodes appear after the kernel announces them.
func (e *Executor) waitDevice(ctx context.Context, path string) (string, error) {
	deadline := e.cfg.now().Add(e.cfg.SeedWait)
	for {
		dev, err := e.cfg.Storage.Resolve(path)
		if err == nil {
			return dev, nil
		}
		if e.cfg.now().After(deadline) {
			return "", fmt.Errorf("%s did not appear within %v: %w", path, e.cfg.SeedWait, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// makeFilesystems creates each extra filesystem and reads its label back
// from the new superblock; array is the md device the image went to.
func (e *Executor) makeFilesystems(ctx context.Context, emit agent.Emitter, p *StoragePlan, array string) error {
	s := e.cfg.Storage
	for _, fs := range p.Filesystems {
		dev := fs.Device.Path
		if fs.Array {
			n, err := s.AddPartition(array, fs.Label)
			if err != nil {
				return fmt.Errorf("partition for filesystem %s on %s: %w", fs.Label, array, err)
			}
			if dev, err = e.waitDevice(ctx, fmt.Sprintf("%sp%d", array, n)); err != nil {
				return err
			}
		}
		args := []string{"-q", "-F", "-t", "ext4", "-L", fs.Label, dev}
		if fs.Type == manifests.FSXFS {
			args = []string{"-q", "-f", "-L", fs.Label, dev}
		}
		if _, stderr, err := s.Run(ctx, "mkfs."+fs.Type, args...); err != nil {
			return fmt.Errorf("mkfs.%s %s: %w: %s", fs.Type, dev, err, strings.TrimSpace(string(stderr)))
		}
		typ, label, err := s.FSLabel(dev)
		if err != nil {
			return fmt.Errorf("reading back filesystem %s: %w", fs.Label, err)
		}
		if typ != fs.Type || label != fs.Label {
			return fmt.Errorf("%s reads back as %s labelled %q, want %s labelled %q", dev, typ, label, fs.Type, fs.Label)
		}
		observed := fmt.Sprintf("%s LABEL=%s on %s", typ, label, dev)
		emit.Verdict(&curev1.Verdict{Component: "filesystem/" + fs.Label, Check: "os_install", Status: curev1.VerdictStatus_PASS,
			Observed: observed, Expected: fmt.Sprintf("%s LABEL=%s mounted at %s", fs.Type, fs.Label, fs.Mount), Message: "made and read back: " + observed})
	}
	return nil
}

// checkArray reads every member's superblock after all writes: one array,
// the level and slots asked, metadata 1.0 with the data at offset 0.
func (e *Executor) checkArray(emit agent.Emitter, p *StoragePlan, array string) error {
	var paths, slots []string
	var sbs []*mdraid.Superblock
	for _, m := range p.Members {
		sb, err := e.cfg.Storage.Examine(m.Path)
		if err != nil {
			return fmt.Errorf("md member %s: %w", m.Name, err)
		}
		paths, sbs = append(paths, m.Path), append(sbs, sb)
		slots = append(slots, fmt.Sprintf("%s slot %d", m.Name, sb.Role()))
	}
	uuid, err := mdraid.CheckMembers(p.Level, paths, sbs)
	if err != nil {
		return err
	}
	sync := "in sync"
	if !sbs[0].InSync() {
		sync = "resyncing in the background"
	}
	observed := fmt.Sprintf("%s %s (metadata 1.0, uuid %s): %s; %s", p.Level, array, uuid, strings.Join(slots, ", "), sync)
	emit.Verdict(&curev1.Verdict{Component: "md/" + ArrayName, Check: "os_install", Status: curev1.VerdictStatus_PASS,
		Observed: observed, Expected: fmt.Sprintf("%s over %d members", p.Level, len(p.Members)), Message: "members' superblocks agree: " + observed})
	return nil
}

// finishStorage makes the extra filesystems, then checks the members'
// superblocks once nothing more is written to the array.
func (e *Executor) finishStorage(ctx context.Context, emit agent.Emitter, p *StoragePlan, array string) error {
	if p == nil {
		return nil
	}
	if err := e.makeFilesystems(ctx, emit, p, array); err != nil {
		return err
	}
	if p.Level == "" {
		return nil
	}
	return e.checkArray(emit, p, array)
}
