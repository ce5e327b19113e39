package manifests

import (
	"fmt"
	"path"
	"strings"

	"gopkg.in/yaml.v3"
)

var (
	fsLabelRE = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	mountRE   = lazyRegexp(`^/[A-Za-z0-9._/-]+$`)
	// fsLabelMax is what each filesystem's superblock holds.
	fsLabelMax = map[string]int{FSExt4: 16, FSXFS: 12}
	// reservedMounts belong to the installed OS's own image.
	reservedMounts = []string{"/", "/boot", "/boot/efi", "/usr", "/var", "/etc", "/proc", "/sys", "/dev", "/run", "/tmp"}
)

// storage decodes spec.os.storage. What needs the node's drives (a
// selector matching one drive, two selectors the same drive) is the
// runner's to refuse; what the manifest alone shows wrong is refused here.
func (d *decoder) storage(n *yaml.Node, p string, growRoot bool) *Storage {
	f := d.mapping(n, p, "raid", "filesystems")
	st := &Storage{}
	if v := f.get("raid"); v != nil {
		st.RAID = d.raid(v, join(p, "raid"))
	}
	selectors := map[DiskSelector]string{}
	if st.RAID != nil {
		for i, m := range st.RAID.Members {
			selectors[m] = index(join(p, "raid.members"), i)
		}
	}
	labels, mounts := map[string]int{}, map[string]int{}
	arrays := 0
	for i, item := range f.seq("filesystems", false) {
		fp := index(join(p, "filesystems"), i)
		fs := d.filesystem(item, fp)
		if fs.Label != "" {
			if line, dup := labels[strings.ToLower(fs.Label)]; dup {
				d.errorf(item, join(fp, "label"), "duplicate label %q (first used on line %d)", fs.Label, line)
			}
			labels[strings.ToLower(fs.Label)] = item.Line
		}
		if fs.Mount != "" {
			if line, dup := mounts[fs.Mount]; dup {
				d.errorf(item, join(fp, "mount"), "duplicate mount point %q (first used on line %d)", fs.Mount, line)
			}
			mounts[fs.Mount] = item.Line
		}
		if fs.Array {
			arrays++
			switch {
			case st.RAID == nil:
				d.errorf(item, join(fp, "array"), "needs storage.raid: there is no array to put it on")
			case growRoot:
				d.errorf(item, join(fp, "array"), "conflicts with growRoot: the root partition would take the array's remaining space")
			case arrays > 1:
				d.errorf(item, join(fp, "array"), "only one filesystem can take the array's remaining space")
			}
		}
		if fs.Disk != nil && !fs.Disk.IsZero() {
			if other, dup := selectors[*fs.Disk]; dup {
				d.errorf(item, join(fp, "disk"), "names the same drive as %s", other)
			}
			selectors[*fs.Disk] = join(fp, "disk")
		}
		st.Filesystems = append(st.Filesystems, fs)
	}
	if st.RAID == nil && len(st.Filesystems) == 0 && f.ok {
		d.errorf(n, p, "is empty: set raid, filesystems or both")
	}
	return st
}

func (d *decoder) raid(n *yaml.Node, p string) *RAID {
	f := d.mapping(n, p, "level", "members")
	r := &RAID{Level: f.enum("level", "", RAIDLevels...)}
	seen := map[DiskSelector]int{}
	items := f.seq("members", true)
	for i, item := range items {
		mp := index(join(p, "members"), i)
		m := d.diskSelector(item, mp)
		if line, dup := seen[m]; dup && !m.IsZero() {
			d.errorf(item, mp, "the same selector as the member on line %d: a drive cannot be in the array twice", line)
		}
		seen[m] = item.Line
		r.Members = append(r.Members, m)
	}
	if want := raidMinMembers[r.Level]; r.Level != "" && items != nil && len(items) < want {
		d.errorf(f.keys["members"], join(p, "members"), "%s needs at least %d members, found %d", r.Level, want, len(items))
	}
	if r.Level == RAID10 && len(items)%2 != 0 {
		d.errorf(f.keys["members"], join(p, "members"), "raid10 (two copies, near layout) needs an even number of members, found %d", len(items))
	}
	return r
}

func (d *decoder) filesystem(n *yaml.Node, p string) Filesystem {
	f := d.mapping(n, p, "type", "label", "mount", "disk", "array")
	fs := Filesystem{Type: f.enum("type", "", FilesystemTypes...)}
	var v *yaml.Node
	fs.Label, v = f.str("label", true)
	if v != nil && fs.Label != "" {
		switch {
		case !fsLabelRE.MatchString(fs.Label):
			d.errorf(v, join(p, "label"), "%q: letters, digits, '_' and '-', starting with a letter or digit", fs.Label)
		case fs.Type != "" && len(fs.Label) > fsLabelMax[fs.Type]:
			d.errorf(v, join(p, "label"), "%q is longer than %s's %d bytes", fs.Label, fs.Type, fsLabelMax[fs.Type])
		case strings.EqualFold(fs.Label, "cidata"):
			d.errorf(v, join(p, "label"), "CIDATA is the first-boot seed's label")
		}
	}
	fs.Mount, v = f.str("mount", true)
	if v != nil && fs.Mount != "" {
		switch {
		case !mountRE.MatchString(fs.Mount) || path.Clean(fs.Mount) != fs.Mount:
			d.errorf(v, join(p, "mount"), "%q is not a clean absolute path (letters, digits, '.', '_', '-', '/')", fs.Mount)
		case isReservedMount(fs.Mount):
			d.errorf(v, join(p, "mount"), "%q belongs to the installed OS's image", fs.Mount)
		}
	}
	if v := f.get("disk"); v != nil {
		s := d.diskSelector(v, join(p, "disk"))
		fs.Disk = &s
	}
	fs.Array = f.boolean("array")
	if f.ok && (fs.Disk != nil) == fs.Array {
		d.errorf(n, p, "set exactly one of disk (a whole drive) and array: true (the array's remaining space)")
	}
	return fs
}

func isReservedMount(m string) bool {
	for _, r := range reservedMounts {
		if m == r {
			return true
		}
	}
	return strings.HasPrefix(m, "/proc/") || strings.HasPrefix(m, "/sys/") || strings.HasPrefix(m, "/dev/")
}

// RAIDMinMembers is the least member count of level (0 when unknown).
func RAIDMinMembers(level string) int { return raidMinMembers[level] }

// String renders the layout for logs: "raid1 over 2 drives, 1 filesystem(s)".
func (s *Storage) String() string {
	if s == nil {
		return "one disk"
	}
	var parts []string
	if s.RAID != nil {
		parts = append(parts, fmt.Sprintf("%s over %d drives", s.RAID.Level, len(s.RAID.Members)))
	}
	if len(s.Filesystems) > 0 {
		parts = append(parts, fmt.Sprintf("%d extra filesystem(s)", len(s.Filesystems)))
	}
	return strings.Join(parts, ", ")
}
