package mdraid

import (
	"fmt"
	"strconv"
	"strings"
)

// Levels the runner creates, by manifest name: md's level number and,
// for raid10, the near-2 layout (two copies, mdadm's default).
var levels = map[string]struct {
	number int32
	layout string
}{"raid1": {1, ""}, "raid10": {10, "n2"}}

// CreateArgs is mdadm's argv (after the program name) to create array
// dev (/dev/md/NAME) at level over members with metadata 1.0: superblock
// at the end of each member, so a RAID1 member reads as the plain disk the
// image is and firmware boots from either. --run answers the question
// mdadm asks about members that hold an old partition table or array;
// --homehost=any lets the installed OS assemble it under any hostname.
// assumeClean skips the initial resync: only for members known zeroed.
func CreateArgs(dev, name, level string, members []string, assumeClean bool) ([]string, error) {
	l, ok := levels[level]
	if !ok {
		return nil, fmt.Errorf("md level %q: expected raid1 or raid10", level)
	}
	args := []string{"--create", dev, "--run", "--metadata=1.0", "--homehost=any", "--name=" + name,
		"--level=" + level, "--raid-devices=" + strconv.Itoa(len(members))}
	if l.layout != "" {
		args = append(args, "--layout="+l.layout)
	}
	if assumeClean {
		args = append(args, "--assume-clean")
	}
	return append(args, members...), nil
}

// CheckMembers checks the superblocks read from members (in the order
// they were given to CreateArgs) describe one array: metadata 1.0, one
// array UUID, the level and member count asked, each member in its own
// active slot, the same event count. It returns the array UUID.
func CheckMembers(level string, members []string, sbs []*Superblock) (string, error) {
	l, ok := levels[level]
	if !ok {
		return "", fmt.Errorf("md level %q: expected raid1 or raid10", level)
	}
	if len(sbs) != len(members) || len(sbs) == 0 {
		return "", fmt.Errorf("md: %d superblocks for %d members", len(sbs), len(members))
	}
	var problems []string
	first := sbs[0]
	slots := map[uint16]string{}
	for i, s := range sbs {
		m := members[i]
		if s.Version != "1.0" {
			problems = append(problems, fmt.Sprintf("%s: metadata %s, want 1.0 (superblock at the end)", m, s.Version))
		}
		if s.ArrayUUID != first.ArrayUUID {
			problems = append(problems, fmt.Sprintf("%s: array %s, %s is in %s", m, UUID(s.ArrayUUID), members[0], UUID(first.ArrayUUID)))
		}
		if s.Level != l.number {
			problems = append(problems, fmt.Sprintf("%s: level %d, want %d", m, s.Level, l.number))
		}
		if s.RaidDisks != uint32(len(members)) {
			problems = append(problems, fmt.Sprintf("%s: %d raid devices, want %d", m, s.RaidDisks, len(members)))
		}
		if s.DataOffset != 0 {
			problems = append(problems, fmt.Sprintf("%s: data offset %d sectors, want 0 (the member must read as the plain disk)", m, s.DataOffset))
		}
		if s.Events != first.Events {
			problems = append(problems, fmt.Sprintf("%s: %d events, %s has %d", m, s.Events, members[0], first.Events))
		}
		role := s.Role()
		switch {
		case role >= RoleJournal:
			problems = append(problems, fmt.Sprintf("%s: role %#04x (spare, faulty or journal), want an active slot", m, role))
		case slots[role] != "":
			problems = append(problems, fmt.Sprintf("%s: slot %d, also %s's", m, role, slots[role]))
		default:
			slots[role] = m
		}
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("md member superblocks: %s", strings.Join(problems, "; "))
	}
	return UUID(first.ArrayUUID), nil
}
