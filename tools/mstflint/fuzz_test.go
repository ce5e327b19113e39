package mstflint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseQuery reads `mstflint query` output; its values come from the
// adapter's flash. An accepted query names a version and a PSID, each a
// single UTF-8 token; line endings do not matter; and no text appended
// after it can replace its PSID or version.
func FuzzParseQuery(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*query*.txt")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("FW Version: 1.2.3\nPSID: MT_1\nRom Info: type=UEFI version=1 cpu=AMD64\n  type=PXE version=2\n"))
	f.Add([]byte("-E- Cannot open Device: 0000:41:00.0. No such file or directory.\n"))
	f.Add([]byte("   FW Version: 1\n"))
	f.Add([]byte("FW Version:\xff\xfe\nPSID: \xc3\x28\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		q, err := ParseQuery(out)
		crlf, err2 := ParseQuery(bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n")))
		if (err == nil) != (err2 == nil) || err == nil && !reflect.DeepEqual(q, crlf) {
			t.Fatalf("CRLF line endings changed the result: %v / %v", err, err2)
		}
		if err != nil {
			return
		}
		for name, v := range map[string]string{"FW Version": q.FWVersion, "PSID": q.PSID, "running": q.Running()} {
			if v == "" || !utf8.ValidString(v) || len(strings.Fields(v)) != 1 {
				t.Fatalf("%s = %q", name, v)
			}
		}
		for k, v := range q.Fields {
			if !utf8.ValidString(k) || !utf8.ValidString(v) || k == "" || k[0] == ' ' {
				t.Fatalf("field %q = %q", k, v)
			}
		}
		if ri := q.Fields["Rom Info"]; ri != "" && len(q.RomInfo) != strings.Count(ri, "\n")+1 {
			t.Fatalf("%d Rom Info entries from %q", len(q.RomInfo), ri)
		}
		if q.PendingReset() && q.RunningFWVersion == q.FWVersion {
			t.Fatal("pending reset with equal versions")
		}
		for k := range interpreted {
			if _, present := q.Fields[k]; !present {
				continue
			}
			if _, err := ParseQuery(append(bytes.Clone(out), "\n"+k+": FORGED\n"...)); err == nil {
				t.Fatalf("a second %q line was accepted", k)
			}
		}
		// A device compared with its own image never needs a burn.
		p, err := PlanUpdate("0000:41:00.0", "img.bin", q, q, "")
		if err != nil || p.Burn || p.Noop() != (q.Running() == q.FWVersion) {
			t.Fatalf("plan against itself: %v, %v", p, err)
		}
	})
}

// A VSD string (vendor data on the adapter's flash) holding a newline
// prints as extra lines: a second version or PSID line is refused instead
// of overriding the real one. Lines longer than 64 KiB no longer end the
// parse silently.
func TestParseQueryHostileOutput(t *testing.T) {
	injected := "Image type:            FS4\nFW Version:            28.39.1002\nImage VSD:             x\nFW Version: 28.99.9999\nPSID:                  MT_0000000838\n"
	if _, err := ParseQuery([]byte(injected)); err == nil || !strings.Contains(err.Error(), `mstflint query output line 4: field "FW Version" appears again (first on line 2)`) {
		t.Errorf("injected version: err = %v", err)
	}
	long := "Image VSD: " + strings.Repeat("v", 100<<10) + "\nFW Version: 1.2.3\nPSID: MT_1\n"
	if q, err := ParseQuery([]byte(long)); err != nil || q.PSID != "MT_1" {
		t.Errorf("long line: %v", err)
	}
	if q, err := ParseQuery([]byte("FW Version: 1.2.3\nPSID: MT_\xff1\n")); err != nil || q.PSID != "MT_\uFFFD1" {
		t.Errorf("PSID %q, %v: want the invalid byte replaced by U+FFFD", q.PSID, err)
	}
}

// cmdError cuts the tool's output at 600 bytes: the message stays UTF-8.
func TestCmdErrorKeepsUTF8(t *testing.T) {
	out := []byte(strings.Repeat("é", 400) + "\xff")
	if err := cmdError("mstflint query", nil, out, nil, errors.New("exit status 1")); !utf8.ValidString(err.Error()) {
		t.Errorf("error %q is not UTF-8", err)
	}
}
