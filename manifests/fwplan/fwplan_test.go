package fwplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
)

// dev is a fake device: tags are what selectors match (match.model names
// one tag), version is the running firmware.
type dev struct {
	name, version string
	tags          []string
	broken        string // Broken's message
	noPSID        bool   // a selector with psid cannot be decided
}

// fake matches match.model against a tag; model "[" is malformed (as a
// bad glob is); a selector with psid is undecided on a noPSID device; a
// model "=tag" matches tag too, and names one device (Ambiguity).
type fake struct{ reportUnmatched bool }

func (fake) Ambiguous(fw *manifests.Firmware, matched []dev) string {
	if !strings.HasPrefix(fw.Match.Model, "=") {
		return ""
	}
	var names []string
	for _, d := range matched {
		names = append(names, d.name)
	}
	return fmt.Sprintf("firmware entry %q names one device, matches %s", fw.Name, strings.Join(names, ","))
}

func (fake) Kind() string        { return "fake" }
func (fake) Label(d dev) string  { return "fake/" + d.name }
func (fake) Broken(d dev) string { return d.broken }
func (fake) Match(m manifests.Match, d dev) (bool, string, error) {
	if m.Model == "[" {
		return false, "", fmt.Errorf("match.model %q: syntax error", m.Model)
	}
	if m.Model != "" && !slices.Contains(d.tags, strings.TrimPrefix(m.Model, "=")) {
		return false, "", nil
	}
	if m.PSID != "" && d.noPSID {
		return false, d.name + ": psid unreadable", nil
	}
	return true, "", nil
}
func (fake) Judge(fw *manifests.Firmware, d dev) Judgement {
	if d.version == fw.Version {
		return Judgement{Status: curev1.VerdictStatus_MATCH, Observed: d.version, Message: d.name + " ok"}
	}
	return Judgement{Status: curev1.VerdictStatus_DRIFT, Observed: d.version, Message: d.name + " drift"}
}
func (fake) NoMatch(fw *manifests.Firmware, devs []dev) string {
	return fmt.Sprintf("firmware entry %q: nothing matches (%d seen)", fw.Name, len(devs))
}
func (f fake) Unmatched(d dev) (Judgement, bool) {
	return Judgement{Observed: d.version, Message: d.name + " unselected"}, f.reportUnmatched
}

func render(c Component[dev], checks []Check[dev]) string {
	var p []string
	for _, ch := range checks {
		e := "-"
		if ch.Entry != nil {
			e = ch.Entry.Name
		}
		p = append(p, fmt.Sprintf("%s[%s]=%s:%s", ch.Component(c), e, ch.Status, ch.Message))
	}
	return strings.Join(p, "\n")
}

func entry(name, model, version string) manifests.Firmware {
	return manifests.Firmware{Name: name, Version: version, Match: manifests.Match{Model: model}}
}

func TestPlanCases(t *testing.T) {
	a := dev{name: "a", version: "1", tags: []string{"x"}}
	b := dev{name: "b", version: "2", tags: []string{"x", "y"}}
	c := dev{name: "c", version: "1", tags: []string{"z"}}
	bad := dev{name: "d", broken: "fake/d: cannot open"}
	for _, tc := range []struct {
		name    string
		report  bool
		entries []manifests.Firmware
		devs    []dev
		want    string
	}{
		{"first entry takes the device", true,
			[]manifests.Firmware{entry("e1", "x", "1"), entry("e2", "y", "2")}, []dev{a, b},
			"fake/a[e1]=MATCH:a ok\nfake/b[e1]=DRIFT:b drift\nfake[e2]=ERROR:firmware entry \"e2\": nothing matches (2 seen)"},
		{"later entry gets what the first leaves", true,
			[]manifests.Firmware{entry("e2", "y", "2"), entry("e1", "x", "1")}, []dev{a, b},
			"fake/b[e2]=MATCH:b ok\nfake/a[e1]=MATCH:a ok"},
		{"unmatched SKIP", true,
			[]manifests.Firmware{entry("e1", "x", "1")}, []dev{a, c},
			"fake/a[e1]=MATCH:a ok\nfake/c[-]=SKIP:c unselected"},
		{"unmatched not reported", false,
			[]manifests.Firmware{entry("e1", "x", "1")}, []dev{a, c},
			"fake/a[e1]=MATCH:a ok"},
		{"broken first, never taken", true,
			[]manifests.Firmware{entry("e1", "", "1")}, []dev{a, bad},
			"fake/d[-]=ERROR:fake/d: cannot open\nfake/a[e1]=MATCH:a ok"},
		{"malformed selector: one ERROR, nothing taken", true,
			[]manifests.Firmware{entry("bad", "[", "1"), entry("e1", "x", "1")}, []dev{a, c},
			"fake[bad]=ERROR:firmware entry \"bad\": match.model \"[\": syntax error\nfake/a[e1]=MATCH:a ok\nfake/c[-]=SKIP:c unselected"},
		{"malformed selector with nothing left to try is a no-match ERROR", true,
			[]manifests.Firmware{entry("e1", "", "1"), entry("bad", "[", "1")}, []dev{a},
			"fake/a[e1]=MATCH:a ok\nfake[bad]=ERROR:firmware entry \"bad\": nothing matches (1 seen)"},
		{"undecided: ERROR, device taken", true,
			[]manifests.Firmware{{Name: "p", Version: "1", Match: manifests.Match{PSID: "MT_1"}}, entry("e1", "", "1")}, []dev{{name: "n", version: "1", noPSID: true}, a},
			"fake/n[p]=ERROR:firmware entry \"p\" on n: psid unreadable\nfake/a[p]=MATCH:a ok\nfake[e1]=ERROR:firmware entry \"e1\": nothing matches (2 seen)"},
		{"one device named, several matched: one ERROR, all taken", true,
			[]manifests.Firmware{entry("one", "=x", "1"), entry("e1", "", "1")}, []dev{a, b, c},
			"fake[one]=ERROR:firmware entry \"one\" names one device, matches a,b\nfake/c[e1]=MATCH:c ok"},
		{"one device named, one matched", true,
			[]manifests.Firmware{entry("one", "=y", "2")}, []dev{a, b},
			"fake/b[one]=MATCH:b ok\nfake/a[-]=SKIP:a unselected"},
		{"no devices", true,
			[]manifests.Firmware{entry("e1", "", "1")}, nil,
			"fake[e1]=ERROR:firmware entry \"e1\": nothing matches (0 seen)"},
		{"no entries", true, nil, []dev{a}, "fake/a[-]=SKIP:a unselected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := fake{tc.report}
			if got := render(k, Plan[dev](k, tc.entries, tc.devs)); got != tc.want {
				t.Errorf("plan\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestPlanExhaustive checks the rules on every combination of up to three
// devices and three entries over a small alphabet of tags, selectors and
// states.
func TestPlanExhaustive(t *testing.T) {
	devKinds := []dev{
		{version: "1", tags: []string{"x"}},
		{version: "2", tags: []string{"x", "y"}},
		{version: "1", tags: []string{"y"}, noPSID: true},
		{broken: "cannot open"},
	}
	entryKinds := []manifests.Firmware{
		{Version: "1", Match: manifests.Match{Model: "x"}},
		{Version: "2", Match: manifests.Match{Model: "y"}},
		{Version: "1"},
		{Version: "1", Match: manifests.Match{Model: "["}},
		{Version: "1", Match: manifests.Match{PSID: "MT_1"}},
		{Version: "1", Match: manifests.Match{Model: "nothing"}},
		{Version: "1", Match: manifests.Match{Model: "=x"}},
	}
	var devSets [][]dev
	var grow func(cur []dev)
	grow = func(cur []dev) {
		devSets = append(devSets, slices.Clone(cur))
		if len(cur) == 3 {
			return
		}
		for _, d := range devKinds {
			d.name = fmt.Sprint("d", len(cur))
			if d.broken != "" {
				d.broken = d.name + ": cannot open"
			}
			grow(append(cur, d))
		}
	}
	grow(nil)
	var entrySets [][]manifests.Firmware
	var growE func(cur []manifests.Firmware)
	growE = func(cur []manifests.Firmware) {
		entrySets = append(entrySets, slices.Clone(cur))
		if len(cur) == 3 {
			return
		}
		for _, e := range entryKinds {
			e.Name = fmt.Sprint("e", len(cur))
			growE(append(cur, e))
		}
	}
	growE(nil)
	n := 0
	for _, devs := range devSets {
		for _, entries := range entrySets {
			for _, report := range []bool{false, true} {
				n++
				checkRules(t, fake{report}, entries, devs)
			}
		}
	}
	t.Logf("%d plans checked", n)
}

func checkRules(t *testing.T, k fake, entries []manifests.Firmware, devs []dev) {
	t.Helper()
	checks := Plan[dev](k, entries, devs)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("entries %+v devices %+v:\n%s\n%s", entries, devs, render(k, checks), fmt.Sprintf(format, args...))
	}
	// Reference: which entry takes each device (index into entries, -1 none).
	owner := make([]int, len(devs))
	for i := range owner {
		owner[i] = -1
	}
	for ei, e := range entries {
		for i, d := range devs {
			if owner[i] != -1 || d.broken != "" {
				continue
			}
			ok, undecided, err := k.Match(e.Match, d)
			if err != nil {
				break // a malformed selector takes nothing more
			}
			if ok || undecided != "" {
				owner[i] = ei
			}
		}
	}
	// An entry naming one device that matched several takes them all and
	// judges none.
	ambiguous := map[int]bool{}
	for ei, e := range entries {
		if n := countOwned(owner, ei); strings.HasPrefix(e.Match.Model, "=") && n > 1 {
			ambiguous[ei] = true
		}
	}
	seen := map[string]int{}
	stage := 0 // 0 broken, 1 entries, 2 unmatched: checks come in this order
	lastEntry := -1
	for _, ch := range checks {
		if ch.HasDevice {
			seen[ch.Device.name]++
		}
		switch {
		case ch.Entry == nil && ch.HasDevice && ch.Device.broken != "":
			if stage != 0 || ch.Status != curev1.VerdictStatus_ERROR || ch.Message != ch.Device.broken {
				fail("broken device %s: stage %d, %v %q", ch.Device.name, stage, ch.Status, ch.Message)
			}
		case ch.Entry == nil:
			stage = 2
			if !k.reportUnmatched || ch.Status != curev1.VerdictStatus_SKIP || !ch.HasDevice {
				fail("unmatched check %+v", ch)
			}
		default:
			if stage == 2 {
				fail("entry check after the unmatched ones")
			}
			stage = 1
			ei := slices.IndexFunc(entries, func(e manifests.Firmware) bool { return e.Name == ch.Entry.Name })
			if ch.Entry != &entries[ei] {
				fail("check's entry is a copy, not the caller's")
			}
			if ei < lastEntry {
				fail("entry %s after a later one", ch.Entry.Name)
			}
			lastEntry = ei
			if !ch.HasDevice {
				if ch.Status != curev1.VerdictStatus_ERROR {
					fail("entry %s without a device is %v, want ERROR", ch.Entry.Name, ch.Status)
				}
				if slices.Contains(owner, ei) && !ambiguous[ei] {
					fail("entry %s took a device yet has a no-device ERROR", ch.Entry.Name)
				}
				continue
			}
			if ambiguous[ei] {
				fail("ambiguous entry %s judged %s", ch.Entry.Name, ch.Device.name)
			}
			i := slices.IndexFunc(devs, func(d dev) bool { return d.name == ch.Device.name })
			if owner[i] != ei {
				fail("%s judged by %s, the first entry matching it is %d", ch.Device.name, ch.Entry.Name, owner[i])
			}
			_, undecided, _ := k.Match(ch.Entry.Match, ch.Device)
			want := k.Judge(ch.Entry, ch.Device).Status
			if undecided != "" {
				want = curev1.VerdictStatus_ERROR
			}
			if ch.Status != want {
				fail("%s by %s: %v, want %v", ch.Device.name, ch.Entry.Name, ch.Status, want)
			}
		}
	}
	for ei := range entries {
		if !slices.ContainsFunc(checks, func(ch Check[dev]) bool { return ch.Entry == &entries[ei] }) {
			fail("entry %s has no check", entries[ei].Name)
		}
		noDev := 0
		for _, ch := range checks {
			if ch.Entry == &entries[ei] && !ch.HasDevice {
				noDev++
			}
		}
		if noDev > 1 || (ambiguous[ei] && noDev != 1) {
			fail("entry %s has %d ERRORs without a device, want at most one (ambiguous: %v)", entries[ei].Name, noDev, ambiguous[ei])
		}
	}
	for i, d := range devs {
		want := 1
		if d.broken == "" && ((owner[i] == -1 && !k.reportUnmatched) || (owner[i] != -1 && ambiguous[owner[i]])) {
			want = 0
		}
		if seen[d.name] != want {
			fail("device %s in %d checks, want %d", d.name, seen[d.name], want)
		}
	}
}

func countOwned(owner []int, ei int) int {
	n := 0
	for _, o := range owner {
		if o == ei {
			n++
		}
	}
	return n
}
