package gpu

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// NVBandwidth is what nvbandwidth (github.com/NVIDIA/nvbandwidth) printed
// in its plain-text form. Its JSON form (-j) is not used: there a testcase
// with several matrices (the bidirectional device-to-device tests: read1,
// read2, total) has their rows run together under one description.
//
// The text form, from output.cpp and inline_common.h (v0.8):
//
//	nvbandwidth Version: v0.8
//	Built from Git version: v0.8
//
//	CUDA Runtime Version: 12080
//	CUDA Driver Version: 12080
//	Driver Version: 570.124.06
//
//	hgx-node-17
//	Device 0: NVIDIA H100 80GB HBM3 (00000000:1b:00)
//	...
//
//	Running device_to_device_memcpy_write_ce.
//	memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
//	           0         1 ...          (setw(10) column labels after 2 spaces)
//	 0       N/A    389.14 ...          (setw(2) row label, setw(10) values, N/A unmeasured)
//
//	SUM device_to_device_memcpy_write_ce 21791.50
//
// A testcase that does not apply prints "Waived: " (without its name); one
// that fails "Error: <why>"; an unknown one "ERROR: Testcase X not found!".
type NVBandwidth struct {
	Version string
	Driver  string
	Devices []NVBDevice
	// Tests are the testcases in the order nvbandwidth reported them.
	Tests []NVBTest
}

// NVBDevice is one "Device N: NAME (domain:bus:device)" line.
type NVBDevice struct {
	Index int
	Name  string
	BusID string // normalised "0000:1b:00.0"
}

// NVBTest is one testcase's outcome.
type NVBTest struct {
	Name     string // "" for a waived testcase (nvbandwidth does not name it)
	Status   string // NVBPassed, NVBWaived, NVBError
	Message  string
	Matrices []NVBMatrix
}

// nvbandwidth's testcase statuses (json_output.cpp).
const (
	NVBPassed = "Passed"
	NVBWaived = "Waived"
	NVBError  = "Error"
)

// NVBMatrix is one result table: Values[row][col] in GB/s (NaN where
// nvbandwidth printed N/A), Key the name its SUM line gives it
// ("device_to_device_bidirectional_memcpy_write_ce_total").
type NVBMatrix struct {
	Key         string
	Description string
	Values      [][]float64
	Sum         float64
}

// maxNVBDim bounds a matrix: nvbandwidth prints one row and column per GPU
// (one row for host tests).
const maxNVBDim = 1024

// ParseNVBandwidth reads nvbandwidth's text output. Malformed tables are
// errors naming the line.
func ParseNVBandwidth(out []byte) (*NVBandwidth, error) {
	out = []byte(strings.ToValidUTF8(string(out), "\uFFFD"))
	p := &nvbParser{r: &NVBandwidth{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		p.line++
		if err := p.parseLine(strings.TrimSpace(sc.Text())); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading nvbandwidth output: %w", err)
	}
	if p.mat != nil {
		return nil, fmt.Errorf("nvbandwidth output: the table of %s has no SUM line (cut short?)", p.cur.Name)
	}
	r := p.r
	for i := range r.Tests {
		if r.Tests[i].Status == "" {
			r.Tests[i].Status = NVBError
			r.Tests[i].Message = "nvbandwidth printed no result (it stopped during this testcase)"
		}
	}
	return r, nil
}

// nvbParser is ParseNVBandwidth's state between lines.
type nvbParser struct {
	r      *NVBandwidth
	cur    *NVBTest
	mat    *NVBMatrix
	cols   int
	desc   string
	inRows bool // between a table's header and its blank line
	line   int
}

func (p *nvbParser) errf(format string, args ...any) error {
	return fmt.Errorf("nvbandwidth output line %d: %s", p.line, fmt.Sprintf(format, args...))
}

// parseLine takes one line, trimmed.
func (p *nvbParser) parseLine(t string) error {
	r := p.r
	switch {
	case p.inRows:
		if t == "" {
			p.inRows = false
			return nil
		}
		return p.row(t)
	case strings.HasPrefix(t, "nvbandwidth Version:"):
		r.Version = strings.TrimSpace(strings.TrimPrefix(t, "nvbandwidth Version:"))
	case strings.HasPrefix(t, "Driver Version:"):
		r.Driver = strings.TrimSpace(strings.TrimPrefix(t, "Driver Version:"))
	case strings.HasPrefix(t, "Device ") && strings.Contains(t, ": "):
		d, err := nvbDevice(t)
		if err != nil {
			return p.errf("%v", err)
		}
		r.Devices = append(r.Devices, d)
	case strings.HasPrefix(t, "Running ") && strings.HasSuffix(t, "."):
		r.Tests = append(r.Tests, NVBTest{Name: strings.TrimSuffix(strings.TrimPrefix(t, "Running "), ".")})
		p.cur, p.mat, p.desc = &r.Tests[len(r.Tests)-1], nil, ""
	case strings.HasPrefix(t, "Waived:"):
		r.Tests = append(r.Tests, NVBTest{Status: NVBWaived, Message: strings.TrimSpace(strings.TrimPrefix(t, "Waived:"))})
		p.cur, p.mat, p.desc = nil, nil, ""
	case strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "ERROR:"):
		msg := strings.TrimSpace(t[len("Error:"):])
		if p.cur != nil && p.cur.Status == "" {
			p.cur.Status, p.cur.Message = NVBError, msg
		} else {
			r.Tests = append(r.Tests, NVBTest{Status: NVBError, Message: msg})
		}
		p.cur, p.mat, p.desc = nil, nil, ""
	case strings.HasPrefix(t, "SUM ") || strings.HasPrefix(t, "&&&& PERF "):
		return p.sum(t)
	case p.cur != nil && (strings.HasSuffix(t, "(GB/s)") || strings.HasSuffix(t, "(ns)")):
		p.desc = t
	case p.cur != nil && p.desc != "" && p.mat == nil && allInts(t):
		p.cols = len(strings.Fields(t))
		if p.cols > maxNVBDim {
			return p.errf("%d table columns, at most %d", p.cols, maxNVBDim)
		}
		p.mat, p.inRows = &NVBMatrix{Description: p.desc}, true
		p.desc = ""
	}
	return nil
}

// row reads one table row: its number, then one value per column.
func (p *nvbParser) row(t string) error {
	f := strings.Fields(t)
	if len(f) != p.cols+1 {
		return p.errf("table row %q has %d values, its header %d", t, len(f)-1, p.cols)
	}
	if _, err := strconv.Atoi(f[0]); err != nil {
		return p.errf("table row %q does not start with a row number", t)
	}
	if len(p.mat.Values) >= maxNVBDim {
		return p.errf("more than %d table rows", maxNVBDim)
	}
	row := make([]float64, p.cols)
	for i, x := range f[1:] {
		if x == "N/A" {
			row[i] = math.NaN()
			continue
		}
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return p.errf("value %q is not a bandwidth", x)
		}
		row[i] = v
	}
	p.mat.Values = append(p.mat.Values, row)
	return nil
}

// sum reads a table's SUM line, which ends the table and names it.
func (p *nvbParser) sum(t string) error {
	if p.mat == nil || p.cur == nil {
		return p.errf("%q with no table before it", t)
	}
	f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(t, "&&&& PERF "), "SUM "))
	if len(f) < 2 {
		return p.errf("%q: expected a key and a sum", t)
	}
	sum, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return p.errf("%q: sum %q is not a number", t, f[1])
	}
	p.mat.Key, p.mat.Sum = f[0], sum
	p.cur.Matrices = append(p.cur.Matrices, *p.mat)
	p.cur.Status = NVBPassed
	p.mat = nil
	return nil
}

func allInts(s string) bool {
	f := strings.Fields(s)
	if len(f) == 0 {
		return false
	}
	for _, x := range f {
		if _, err := strconv.Atoi(x); err != nil {
			return false
		}
	}
	return true
}

// nvbDevice reads "Device 0: NVIDIA H100 80GB HBM3 (00000000:1b:00)".
func nvbDevice(t string) (NVBDevice, error) {
	head, rest, _ := strings.Cut(t, ": ")
	idx, err := strconv.Atoi(strings.TrimPrefix(head, "Device "))
	if err != nil || idx < 0 {
		return NVBDevice{}, fmt.Errorf("%q: expected \"Device N: name (bus id)\"", t)
	}
	d := NVBDevice{Index: idx, Name: rest}
	if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
		d.Name = rest[:i]
		d.BusID = NormalizeBusID(rest[i+2:len(rest)-1] + ".0")
	}
	return d, nil
}

// Test returns the first testcase named name.
func (r *NVBandwidth) Test(name string) (NVBTest, bool) {
	for _, t := range r.Tests {
		if t.Name == name {
			return t, true
		}
	}
	return NVBTest{}, false
}
