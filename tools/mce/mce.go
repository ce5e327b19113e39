// Package mce reads x86 machine checks as Linux reports them: the records
// the kernel prints in the kernel log ("mce: [Hardware Error]: CPU 0:
// Machine Check: 0 Bank 9: 9c0000000000009f", then TSC/ADDR/MISC and
// PROCESSOR lines), the exception and poll counts in /proc/interrupts, and
// the poll interval (machinecheck check_interval), which the runner
// shortens for a diagnostic so a corrected error surfaces within seconds
// rather than the kernel's default five minutes.
package mce

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/kmsg"
)

// MCi_STATUS bits (Intel SDM vol. 3B, "IA32_MCi_STATUS MSRs"; AMD's
// MCA_STATUS has the same layout for these).
const (
	StatusVAL   uint64 = 1 << 63 // the register holds an error
	StatusOVER  uint64 = 1 << 62 // an earlier error was lost
	StatusUC    uint64 = 1 << 61 // uncorrected
	StatusEN    uint64 = 1 << 60 // reporting enabled
	StatusMISCV uint64 = 1 << 59
	StatusADDRV uint64 = 1 << 58 // MCi_ADDR holds the address
	StatusPCC   uint64 = 1 << 57 // processor context corrupt
	StatusS     uint64 = 1 << 56 // signalled (#MC)
	StatusAR    uint64 = 1 << 55 // action required
)

// Record is one machine check the kernel logged.
type Record struct {
	CPU       int
	Bank      int
	MCGStatus uint64
	Status    uint64
	Addr      uint64 // valid when Status has ADDRV
	Misc      uint64
	Socket    int
	APIC      int
	Vendor    int // the kernel's x86 vendor number: 0 Intel, 2 AMD
	CPUID     uint32
	Exception bool          // raised #MC ("Machine Check Exception"), not found by polling
	Uptime    time.Duration // when the kernel logged it
	Lines     []string      // the kernel's lines of this record, dmesg form
}

// Uncorrected reports an uncorrected error (UC).
func (r Record) Uncorrected() bool { return r.Status&StatusUC != 0 }

// HasAddr reports whether Addr is the error's address (ADDRV).
func (r Record) HasAddr() bool { return r.Status&StatusADDRV != 0 }

// MCACOD is the architectural error code (bits 15:0).
func (r Record) MCACOD() uint16 { return uint16(r.Status) }

// Kind names the MCACOD class (Intel SDM vol. 3B, "Compound error
// codes"; bit 12, the corrected-error filter, is ignored).
func (r Record) Kind() string {
	c := r.MCACOD() &^ 0x1000
	switch {
	case c&0xff80 == 0x0080:
		return "memory controller " + memoryOp(c)
	case c&0xff00 == 0x0100:
		return "cache hierarchy"
	case c&0xf800 == 0x0800:
		return "bus/interconnect"
	case c&0xfff0 == 0x0010:
		return "TLB"
	case c&0xfffc == 0x000c:
		return "generic cache hierarchy"
	case c&0xfc00 == 0x0400:
		return "internal"
	case c == 0x0005:
		return "internal parity"
	case c == 0x0000:
		return "no error code"
	}
	return fmt.Sprintf("error code 0x%04x", c)
}

// Memory reports a memory-controller error: the class whose address
// names a DIMM.
func (r Record) Memory() bool { return (r.MCACOD()&^0x1000)&0xff80 == 0x0080 }

// memoryOp spells the MMM field of a memory controller error code.
func memoryOp(c uint16) string {
	ops := []string{"generic", "read", "write", "address/command", "scrub", "error", "error", "error"}
	s := ops[(c>>4)&7] + " error"
	if ch := c & 0xf; ch != 0xf {
		s += fmt.Sprintf(", channel %d", ch)
	}
	return s
}

// Severity is the record's class in words: "uncorrected (fatal)",
// "uncorrected", "corrected".
func (r Record) Severity() string {
	switch {
	case r.Uncorrected() && r.Status&StatusPCC != 0:
		return "uncorrected, processor context corrupt"
	case r.Uncorrected():
		return "uncorrected"
	}
	return "corrected"
}

// String is the record in one line: "CPU 0 bank 9: corrected memory
// controller read error, status 0x9c0000000000009f, address 0x1000".
func (r Record) String() string {
	s := fmt.Sprintf("CPU %d bank %d: %s %s, status 0x%016x", r.CPU, r.Bank, r.Severity(), r.Kind(), r.Status)
	if r.HasAddr() {
		s += fmt.Sprintf(", address 0x%x", r.Addr)
	}
	return s
}

const prefix = "mce: [Hardware Error]: "

var (
	headRE = regexp.MustCompile(`^CPU (\d+): Machine Check( Exception)?: ([0-9a-f]+) Bank (\d+): ([0-9a-f]{1,16})$`)
	procRE = regexp.MustCompile(`^PROCESSOR (\d+):([0-9a-f]+) TIME \d+ SOCKET (\d+) APIC ([0-9a-f]+)`)
)

// maxRecords bounds what one log yields: an error storm is summarised by
// its count, not carried whole.
const maxRecords = 4096

// Parse finds the machine-check records in kernel log records, in order.
// A record is a header line ("CPU n: Machine Check...") and the TSC and
// PROCESSOR lines that follow it.
func Parse(recs []kmsg.Record) []Record {
	var out []Record
	cur := -1
	for _, k := range recs {
		body, ok := strings.CutPrefix(k.Message, prefix)
		if !ok {
			continue
		}
		if m := headRE.FindStringSubmatch(body); m != nil {
			if len(out) == maxRecords {
				cur = -1
				continue
			}
			r := Record{Exception: m[2] != "", Uptime: k.Uptime, Lines: []string{k.Line()}}
			r.CPU, _ = strconv.Atoi(m[1])
			r.MCGStatus, _ = strconv.ParseUint(m[3], 16, 64)
			r.Bank, _ = strconv.Atoi(m[4])
			r.Status, _ = strconv.ParseUint(m[5], 16, 64)
			out = append(out, r)
			cur = len(out) - 1
			continue
		}
		if cur < 0 {
			continue
		}
		r := &out[cur]
		switch {
		case strings.HasPrefix(body, "TSC "):
			f := strings.Fields(body)
			for i := 0; i+1 < len(f); i += 2 {
				v, err := strconv.ParseUint(f[i+1], 16, 64)
				if err != nil {
					continue
				}
				switch f[i] {
				case "ADDR":
					r.Addr = v
				case "MISC":
					r.Misc = v
				}
			}
		case strings.HasPrefix(body, "PROCESSOR "):
			if m := procRE.FindStringSubmatch(body); m != nil {
				r.Vendor, _ = strconv.Atoi(m[1])
				id, _ := strconv.ParseUint(m[2], 16, 32)
				r.CPUID = uint32(id)
				r.Socket, _ = strconv.Atoi(m[3])
				apic, _ := strconv.ParseUint(m[4], 16, 32)
				r.APIC = int(apic)
			}
			r.Lines = append(r.Lines, k.Line())
			cur = -1 // the record's last line
			continue
		case strings.HasPrefix(body, "RIP"):
		default:
			cur = -1
			continue
		}
		r.Lines = append(r.Lines, k.Line())
	}
	return out
}

// Evidence reports whether a kernel log line is about a hardware error:
// machine checks, EDAC, APEI/GHES and memory-failure handling.
func Evidence(msg string) bool {
	if strings.HasPrefix(msg, "EDAC ") {
		// The drivers' error reports, not their start-up banners.
		return strings.Contains(msg, " CE ") || strings.Contains(msg, " UE ") || strings.Contains(msg, "error")
	}
	return strings.Contains(msg, "[Hardware Error]") || strings.HasPrefix(msg, "Memory failure:") ||
		strings.Contains(strings.ToLower(msg), "machine check")
}

// Counts are the machine-check rows of /proc/interrupts, summed over CPUs.
type Counts struct {
	Exceptions uint64 // MCE: #MC exceptions taken
	Polls      uint64 // MCP: bank polls (corrected errors are found by these)
}

// ReadCounts reads root/proc/interrupts. A kernel without the rows has
// zero of each.
func ReadCounts(root string) (Counts, error) {
	f, err := os.Open(filepath.Join(root, "proc/interrupts"))
	if err != nil {
		return Counts{}, fmt.Errorf("machine check counts: %w", err)
	}
	defer f.Close()
	return ParseCounts(f)
}

// ParseCounts reads /proc/interrupts' MCE and MCP rows.
func ParseCounts(r io.Reader) (Counts, error) {
	var c Counts
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // one column per CPU
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (name != "MCE" && name != "MCP") {
			continue
		}
		var sum uint64
		for _, f := range strings.Fields(rest) {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				break // the row's description
			}
			sum += n
		}
		if name == "MCE" {
			c.Exceptions = sum
		} else {
			c.Polls = sum
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading /proc/interrupts: %w", err)
	}
	return c, nil
}

// checkInterval is the kernel's machine-check poll interval (seconds),
// one value for every CPU; writing it restarts the pollers.
const checkInterval = "sys/devices/system/machinecheck/machinecheck0/check_interval"

// ErrNoMCE means the kernel has no machine-check support here (no
// machinecheck devices): not an x86 CPU with MCA, or mce=off.
var ErrNoMCE = errors.New("no machine-check support in this kernel (no machinecheck devices)")

// PollInterval reads the current poll interval.
func PollInterval(root string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(root, checkInterval))
	if errors.Is(err, os.ErrNotExist) {
		return 0, ErrNoMCE
	}
	if err != nil {
		return 0, fmt.Errorf("machine-check poll interval: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("machine-check poll interval %q: %w", strings.TrimSpace(string(b)), err)
	}
	return time.Duration(n) * time.Second, nil
}

// SetPollInterval makes the kernel poll every CPU's banks every d (whole
// seconds, at least one) when the interval is longer, and returns the
// interval in force. Restarting the pollers logs what the banks hold
// unless the kernel was told not to (mce=nobootlog, and AMD before family
// 0x11): call it before the errors one wants to see, not after.
func SetPollInterval(root string, d time.Duration) (time.Duration, error) {
	cur, err := PollInterval(root)
	if err != nil {
		return 0, err
	}
	secs := max(int64(d/time.Second), 1)
	if cur > 0 && cur <= time.Duration(secs)*time.Second {
		return cur, nil
	}
	if err := os.WriteFile(filepath.Join(root, checkInterval), []byte(strconv.FormatInt(secs, 10)), 0); err != nil {
		return cur, fmt.Errorf("setting the machine-check poll interval to %ds: %w", secs, err)
	}
	return time.Duration(secs) * time.Second, nil
}
