package kmsg

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRecorded(t *testing.T) {
	b, err := os.ReadFile("testdata/qemu-tcg-mce.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 300 {
		t.Fatalf("%d records, want the whole boot", len(recs))
	}
	var pci, mce []Record
	for _, r := range recs {
		if r.Device == "+pci:0000:01:00.0" {
			pci = append(pci, r)
		}
		if strings.HasPrefix(r.Message, "mce: ") {
			mce = append(mce, r)
		}
	}
	if len(pci) != 2 || pci[0].Subsystem != "pci" || pci[0].Message != "pci 0000:01:00.0: [1b36:0010] type 00 class 0x010802" {
		t.Errorf("records of 0000:01:00.0: %+v", pci)
	}
	if len(mce) != 4 {
		t.Fatalf("mce records %+v", mce)
	}
	m := mce[1]
	if m.Seq != 394 || m.Priority != 0 || m.Facility != 0 || m.Uptime != 5774702*time.Microsecond ||
		m.Message != "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f" {
		t.Errorf("record %+v", m)
	}
	if got := m.Line(); got != "[    5.774702] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f" {
		t.Errorf("Line() = %q", got)
	}
	if mce[2].Message != "mce: [Hardware Error]: TSC 0 ADDR 1000 MISC 86" {
		t.Errorf("trailing space kept: %q", mce[2].Message)
	}
	last, n := Matching(recs, 2, func(r Record) bool { return strings.HasPrefix(r.Message, "mce: ") })
	if n != 4 || len(last) != 2 || last[1].Seq != 396 || last[0].Seq != 395 {
		t.Errorf("Matching: %d matched, kept %+v", n, last)
	}
}

// Malformed lines are skipped, and a dictionary line belongs only to the
// record right before it.
func TestParseSkipsGarbage(t *testing.T) {
	in := " DEVICE=+pci:orphan\n" +
		"6,1,100,-;first\n" +
		" SUBSYSTEM=pci\n" +
		"not a record\n" +
		" DEVICE=+pci:0000:00:01.0\n" +
		"x,2,100,-;bad prio\n" +
		"6,3,-5,-;negative time\n" +
		"6,4,99999999999999999,-;far future\n" +
		"6,5,200;no flags is fine\n" +
		"14,6,300,-;user facility\n"
	recs, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Message != "first" || recs[0].Subsystem != "pci" || recs[0].Device != "" ||
		recs[1].Seq != 5 || recs[2].Facility != 1 || recs[2].Priority != 6 {
		t.Errorf("records %+v", recs)
	}
}

// Read serves a regular file too (what a test's root holds for /dev/kmsg).
func TestReadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte("6,1,100,-;hello\n SUBSYSTEM=nvme\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(p)
	if err != nil || len(recs) != 1 || recs[0].Subsystem != "nvme" {
		t.Fatalf("Read = %+v, %v", recs, err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Read of a missing log: no error")
	}
}

// FuzzParse: the kernel log carries text drivers and devices put there;
// whatever is parsed stays bounded and valid UTF-8.
func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile("testdata/qemu-tcg-mce.kmsg")
	f.Add(b[len(b)-600:])
	f.Add([]byte("6,1,100,-;a\n SUBSYSTEM=pci\n DEVICE=+pci:x\n"))
	f.Add([]byte("0,2,3;\xff\xfe\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, _ := Parse(bytes.NewReader(data))
		for _, r := range recs {
			if len(r.Message) > maxMessage+3*maxMessage/4 || r.Uptime < 0 || r.Priority > 7 {
				t.Fatalf("record %+v", r)
			}
			if !utf8Valid(r.Message) || !utf8Valid(r.Device) || !utf8Valid(r.Subsystem) {
				t.Fatalf("invalid UTF-8 in %+v", r)
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
