package gpu

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// NCCLTest is what one nccl-tests program (github.com/NVIDIA/nccl-tests:
// all_reduce_perf, all_gather_perf, ...) printed. The format, from
// src/common.cu and what 2.18 prints:
//
//	# nccl-tests version 2.18.3 nccl-headers=22803 nccl-library=22803
//	# Collective test starting: all_reduce_perf
//	# nThread 1 nGpus 8 minBytes 8388608 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
//	#
//	# Using devices
//	#  Rank  0 Group  0 Pid  41235 on hgx-node-17 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
//	...
//	#
//	#                                                              out-of-place                       in-place
//	#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
//	#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
//	     8388608       2097152     float     sum      -1    54.73  153.27  268.22       0    53.91  155.60  272.30       0
//	...
//	# Out of bounds values : 0 OK
//	# Avg bus bandwidth    : 356.412
//
// Older releases print the device as "[0x1b]" and have no Group column;
// "#wrong" is N/A with -c 0. A failed run prints "<host>: Test NCCL
// failure common.cu:NNN '<why>'" (or CUDA) and no summary.
type NCCLTest struct {
	Version     string // nccl-tests' own version, where it prints one
	Collective  string // all_reduce_perf
	NCCLVersion string // "2.21.5+cuda12.4", from NCCL's own banner
	Ranks       []NCCLRank
	Rows        []NCCLRow
	// OutOfBounds is the count on "# Out of bounds values"; Summary says
	// that line and "# Avg bus bandwidth" were printed.
	OutOfBounds int
	AvgBusBW    float64
	Summary     bool
	Failures    []string // "Test NCCL failure ..." lines
}

// NCCLRank is one "#  Rank N ... device D [bus] name" line.
type NCCLRank struct {
	Rank   int
	Device int
	Bus    string // as printed: "0000:1b:00" or "0x1b"
	BusID  string // normalised when the line has the domain ("0000:1b:00.0"), else ""
	Name   string
}

// NCCLRow is one message size's results.
type NCCLRow struct {
	Bytes      int64
	Count      int64
	Type       string
	OutOfPlace NCCLResult
	InPlace    NCCLResult
}

// NCCLResult is one half of a row: time (us), algorithm and bus bandwidth
// (GB/s) and wrong elements (-1 when the run did not check: N/A).
type NCCLResult struct {
	TimeUs float64
	AlgBW  float64
	BusBW  float64
	Wrong  float64
}

// ncclRank reads "#  Rank  0 Group  0 Pid  41235 on host device  0
// [0000:1b:00] NVIDIA H100 80GB HBM3" (no Group in older releases).
func ncclRank(t string) (NCCLRank, bool) {
	f := strings.Fields(strings.TrimPrefix(t, "#"))
	var r NCCLRank
	if len(f) < 8 || f[0] != "Rank" {
		return r, false
	}
	rank, err := strconv.Atoi(f[1])
	if err != nil {
		return r, false
	}
	i := 2
	if f[i] == "Group" {
		i += 2
	}
	if i+5 >= len(f) || f[i] != "Pid" || f[i+2] != "on" || f[i+4] != "device" {
		return r, false
	}
	dev, err := strconv.Atoi(f[i+5])
	if err != nil || i+6 >= len(f) {
		return r, false
	}
	bus := f[i+6]
	if !strings.HasPrefix(bus, "[") || !strings.HasSuffix(bus, "]") {
		return r, false
	}
	r = NCCLRank{Rank: rank, Device: dev, Bus: bus[1 : len(bus)-1], Name: strings.Join(f[i+7:], " ")}
	if strings.Count(r.Bus, ":") == 2 {
		r.BusID = NormalizeBusID(r.Bus + ".0")
	}
	return r, true
}

// maxNCCLRows bounds the table: a size sweep by a factor of 2 from 1 byte
// to 2^63 has 64 rows; -N run cycles repeat it.
const maxNCCLRows = 1 << 14

// ParseNCCLTest reads one nccl-tests program's output; a data row that is
// not one is an error naming its line.
func ParseNCCLTest(out []byte) (*NCCLTest, error) {
	out = []byte(strings.ToValidUTF8(string(out), "\uFFFD"))
	r := &NCCLTest{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	avg, oob := false, false
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		switch {
		case t == "":
		case strings.HasPrefix(t, "# nccl-tests version "):
			f := strings.Fields(strings.TrimPrefix(t, "# nccl-tests version "))
			if len(f) > 0 {
				r.Version = f[0]
			}
		case strings.HasPrefix(t, "# Collective test starting:"):
			r.Collective = strings.TrimSpace(strings.TrimPrefix(t, "# Collective test starting:"))
		case strings.HasPrefix(t, "NCCL version "):
			r.NCCLVersion = strings.TrimSpace(strings.TrimPrefix(t, "NCCL version "))
		case strings.HasPrefix(t, "# Out of bounds values :"):
			f := strings.Fields(strings.TrimPrefix(t, "# Out of bounds values :"))
			n, err := strconv.Atoi(first(f))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("nccl-tests output line %d: %q: expected a count", line, t)
			}
			r.OutOfBounds, oob = n, true
		case strings.HasPrefix(t, "# Avg bus bandwidth"):
			_, v, _ := strings.Cut(t, ":")
			x, err := strconv.ParseFloat(first(strings.Fields(v)), 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("nccl-tests output line %d: %q: expected a bandwidth", line, t)
			}
			r.AvgBusBW, avg = x, true
		case strings.HasPrefix(t, "#"):
			if nr, ok := ncclRank(t); ok {
				r.Ranks = append(r.Ranks, nr)
			}
		case strings.Contains(t, "Test NCCL failure") || strings.Contains(t, "Test CUDA failure") || strings.Contains(t, "Test failure"):
			r.Failures = append(r.Failures, t)
		default:
			f := strings.Fields(t)
			if len(f) < 11 {
				continue // NCCL's own banner lines, warnings
			}
			size, err1 := strconv.ParseInt(f[0], 10, 64)
			count, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			if size < 0 || count < 0 {
				return nil, fmt.Errorf("nccl-tests output line %d: negative size or count", line)
			}
			perf := f[len(f)-8:]
			var res [2]NCCLResult
			for h := range 2 {
				p := perf[4*h : 4*h+4]
				vals := make([]float64, 4)
				for i, x := range p {
					if i == 3 && x == "N/A" {
						vals[i] = -1
						continue
					}
					v, err := strconv.ParseFloat(x, 64)
					if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
						return nil, fmt.Errorf("nccl-tests output line %d: %q is not a time, bandwidth or count", line, x)
					}
					vals[i] = v
				}
				res[h] = NCCLResult{TimeUs: vals[0], AlgBW: vals[1], BusBW: vals[2], Wrong: vals[3]}
			}
			if len(r.Rows) >= maxNCCLRows {
				return nil, fmt.Errorf("nccl-tests output line %d: more than %d result rows", line, maxNCCLRows)
			}
			r.Rows = append(r.Rows, NCCLRow{Bytes: size, Count: count, Type: f[2], OutOfPlace: res[0], InPlace: res[1]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading nccl-tests output: %w", err)
	}
	r.Summary = avg && oob
	return r, nil
}

func first(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Largest is the row of the largest message size (the last of a sweep
// that ran more than once), and whether there is one.
func (r *NCCLTest) Largest() (NCCLRow, bool) {
	if len(r.Rows) == 0 {
		return NCCLRow{}, false
	}
	best := r.Rows[0]
	for _, row := range r.Rows[1:] {
		if row.Bytes >= best.Bytes {
			best = row
		}
	}
	return best, true
}

// WrongElements sums the #wrong columns (data corruption the run found).
func (r *NCCLTest) WrongElements() float64 {
	var n float64
	for _, row := range r.Rows {
		n += max(row.OutOfPlace.Wrong, 0) + max(row.InPlace.Wrong, 0)
	}
	return n
}
