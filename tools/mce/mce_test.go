package mce

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/kmsg"
)

func recorded(t *testing.T) []kmsg.Record {
	t.Helper()
	recs, err := kmsg.Read("../kmsg/testdata/qemu-tcg-mce.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// console turns dmesg-form lines ("[    5.218757] msg") into records.
func console(t *testing.T, path string) []kmsg.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []kmsg.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ts, msg, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "["), "] ")
		if !ok {
			continue
		}
		s, _ := strconv.ParseFloat(strings.TrimSpace(ts), 64)
		out = append(out, kmsg.Record{Uptime: time.Duration(s * 1e6 * float64(time.Microsecond)), Message: strings.TrimRight(msg, " ")})
	}
	return out
}

// The corrected memory error QEMU's monitor injected, as the Debian kernel
// logged it after polling bank 9.
func TestParseCorrected(t *testing.T) {
	rs := Parse(recorded(t))
	if len(rs) != 1 {
		t.Fatalf("records %+v", rs)
	}
	r := rs[0]
	if r.CPU != 0 || r.Bank != 9 || r.Status != 0x9c0000000000009f || r.Addr != 0x1000 || r.Misc != 0x86 ||
		r.Socket != 0 || r.APIC != 0 || r.Vendor != 2 || r.CPUID != 0x60fb1 || r.Exception || r.Uptime != 5774702*time.Microsecond {
		t.Errorf("record %+v", r)
	}
	if r.Uncorrected() || !r.HasAddr() || !r.Memory() || r.Kind() != "memory controller read error" {
		t.Errorf("decoded: uc %t addr %t memory %t kind %q", r.Uncorrected(), r.HasAddr(), r.Memory(), r.Kind())
	}
	if got := r.String(); got != "CPU 0 bank 9: corrected memory controller read error, status 0x9c0000000000009f, address 0x1000" {
		t.Errorf("String() = %q", got)
	}
	if len(r.Lines) != 3 || !strings.Contains(r.Lines[1], "TSC 0 ADDR 1000 MISC 86") || !strings.Contains(r.Lines[2], "PROCESSOR 2:60fb1") {
		t.Errorf("lines %q", r.Lines)
	}
}

// The uncorrected one that made the same kernel panic: an exception,
// with a RIP line, processor context intact but UC.
func TestParseUncorrected(t *testing.T) {
	rs := Parse(console(t, "testdata/qemu-tcg-uncorrected.console"))
	if len(rs) != 1 {
		t.Fatalf("records %+v", rs)
	}
	r := rs[0]
	if !r.Exception || r.MCGStatus != 5 || r.Status != 0xbd000000000000c0 || r.Addr != 0x1000 || !r.Uncorrected() ||
		r.Severity() != "uncorrected" || r.Kind() != "memory controller scrub error, channel 0" || len(r.Lines) != 4 {
		t.Errorf("record %+v kind %q", r, r.Kind())
	}
}

func TestKinds(t *testing.T) {
	for code, want := range map[uint64]string{
		0x009f: "memory controller read error", 0x10a1: "memory controller write error, channel 1",
		0x0134: "cache hierarchy", 0x0e0b: "bus/interconnect", 0x0014: "TLB", 0x000d: "generic cache hierarchy",
		0x0400: "internal", 0x0005: "internal parity", 0x0000: "no error code", 0x0001: "error code 0x0001",
	} {
		r := Record{Status: StatusVAL | code}
		if r.Kind() != want {
			t.Errorf("0x%04x: %q, want %q", code, r.Kind(), want)
		}
		if r.Memory() != strings.HasPrefix(want, "memory controller") {
			t.Errorf("0x%04x: Memory() = %t", code, r.Memory())
		}
	}
	if s := (Record{Status: StatusUC | StatusPCC}).Severity(); s != "uncorrected, processor context corrupt" {
		t.Errorf("severity %q", s)
	}
}

func TestEvidence(t *testing.T) {
	for msg, want := range map[string]bool{
		"mce: [Hardware Error]: Machine check events logged":                     true,
		"EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0 (x)": true,
		"{1}[Hardware Error]: section_type: memory error":                        true,
		"Memory failure: 0x1: recovery action for free buddy page: Recovered":    true,
		"nvme nvme0: I/O 12 QID 1 timeout, aborting":                             false,
	} {
		if Evidence(msg) != want {
			t.Errorf("Evidence(%q) = %t", msg, !want)
		}
	}
}

func TestCounts(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	// The rows as the probed guest printed them, and a CPU row.
	os.WriteFile(filepath.Join(root, "proc/interrupts"), []byte("           CPU0       CPU1       \n"+
		"  0:         41          0   IO-APIC   2-edge      timer\n"+
		"MCE:          1          2   Machine check exceptions\n"+
		"MCP:         42         42   Machine check polls\n"), 0o644)
	c, err := ReadCounts(root)
	if err != nil || c != (Counts{Exceptions: 3, Polls: 84}) {
		t.Errorf("counts %+v, %v", c, err)
	}
}

func TestSetPollInterval(t *testing.T) {
	root := t.TempDir()
	if _, err := SetPollInterval(root, 2*time.Second); err != ErrNoMCE {
		t.Errorf("no machinecheck devices: %v", err)
	}
	p := filepath.Join(root, checkInterval)
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("300\n"), 0o644)
	got, err := SetPollInterval(root, 2*time.Second)
	b, _ := os.ReadFile(p)
	if err != nil || got != 2*time.Second || string(b) != "2" {
		t.Errorf("set: %s %v, file %q", got, err, b)
	}
	// Already shorter: left alone.
	os.WriteFile(p, []byte("1\n"), 0o644)
	if got, err := SetPollInterval(root, 5*time.Second); err != nil || got != time.Second {
		t.Errorf("shorter already: %s %v", got, err)
	}
}

// FuzzParse: machine-check lines are the kernel's, but the log holds text
// from everything; parsing never panics and keeps its bound.
func FuzzParse(f *testing.F) {
	f.Add("mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f\nmce: [Hardware Error]: TSC 0 ADDR 1000 MISC 86\nmce: [Hardware Error]: PROCESSOR 2:60fb1 TIME 1 SOCKET 0 APIC 0 microcode 1")
	f.Add("mce: [Hardware Error]: CPU 99999999999999999999: Machine Check Exception: ffffffffffffffffff Bank 1: 0\nmce: [Hardware Error]: TSC ADDR zz ADDR")
	f.Add("MCE: 1 2 x\nMCP: 99999999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		var recs []kmsg.Record
		for _, l := range strings.Split(s, "\n") {
			recs = append(recs, kmsg.Record{Message: l})
		}
		rs := Parse(recs)
		if len(rs) > maxRecords || len(rs) > len(recs) {
			t.Fatalf("%d records from %d lines", len(rs), len(recs))
		}
		for _, r := range rs {
			_ = r.String()
		}
		if _, err := ParseCounts(strings.NewReader(s)); err != nil && !strings.Contains(err.Error(), "interrupts") {
			t.Fatal(err)
		}
	})
}
