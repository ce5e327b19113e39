// Package perftest reads the report of perftest's bandwidth tools
// (ib_write_bw, ib_read_bw): the test, the device, the link type and the
// result row (message size, iterations, peak and average bandwidth,
// message rate), or the tool's own error lines when it could not run. It
// runs nothing; the node-pair check builds the command lines.
package perftest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxReport bounds the report read.
const MaxReport = 1 << 20

// Report is one run of a bandwidth test, on either side.
type Report struct {
	Test     string // "RDMA_Write BW Test"
	Device   string // mlx5_0
	LinkType string // IB, Ethernet
	Bytes    int64  // message size
	Iters    int64
	// PeakGbps and AvgGbps are in Gb/s (10^9 bits a second) whatever
	// unit the report used: perftest's MB/sec is 2^20 bytes a second.
	PeakGbps, AvgGbps float64
	MsgRateMpps       float64
	// Unit is the unit the report printed (MB/sec or Gb/sec).
	Unit string
}

// Parse reads a perftest bandwidth report. A report without a result row
// is an error carrying perftest's own error lines ("Couldn't connect to
// 10.1.0.1:18515; Unable to init the socket connection").
func Parse(b []byte) (*Report, error) {
	if len(b) > MaxReport {
		return nil, fmt.Errorf("perftest: report of %d bytes is over the %d-byte bound", len(b), MaxReport)
	}
	r := &Report{}
	var problems []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	header := false
	for sc.Scan() {
		line := sc.Text()
		t := strings.TrimSpace(line)
		switch {
		case t == "" || strings.HasPrefix(t, "---"):
			continue
		case strings.HasSuffix(t, "BW Test"):
			r.Test = t
		case strings.HasPrefix(t, "Dual-port"):
			if _, dev, ok := strings.Cut(t, "Device"); ok {
				r.Device = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(dev), ":"))
			}
		case strings.HasPrefix(t, "Link type"):
			_, v, _ := strings.Cut(t, ":")
			r.LinkType = strings.TrimSpace(v)
		case strings.HasPrefix(t, "#bytes"):
			switch {
			case strings.Contains(t, "BW average[MB/sec]"):
				r.Unit = "MB/sec"
			case strings.Contains(t, "BW average[Gb/sec]"):
				r.Unit = "Gb/sec"
			default:
				return nil, fmt.Errorf("perftest: result header %q: unknown unit", t)
			}
			header = true
		case header && r.Iters == 0:
			if err := r.row(t); err != nil {
				return nil, err
			}
		case strings.HasPrefix(t, "Couldn't") || strings.HasPrefix(t, "Unable") || strings.HasPrefix(t, "Did not") ||
			strings.HasPrefix(t, "Failed") || strings.HasPrefix(t, "ERROR") || strings.Contains(t, "error"):
			problems = append(problems, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	if r.Iters == 0 {
		if len(problems) > 0 {
			return nil, fmt.Errorf("perftest: no result: %s", strings.Join(problems, "; "))
		}
		return nil, errors.New("perftest: the report has no result row")
	}
	return r, nil
}

// row reads " 65536      5000             45923.11            45920.87	   0.734734".
func (r *Report) row(t string) error {
	f := strings.Fields(t)
	if len(f) < 5 {
		return fmt.Errorf("perftest: result row %q: want bytes, iterations, peak, average, message rate", t)
	}
	var err error
	if r.Bytes, err = strconv.ParseInt(f[0], 10, 64); err != nil || r.Bytes <= 0 {
		return fmt.Errorf("perftest: result row %q: message size %q", t, f[0])
	}
	if r.Iters, err = strconv.ParseInt(f[1], 10, 64); err != nil || r.Iters <= 0 {
		return fmt.Errorf("perftest: result row %q: iterations %q", t, f[1])
	}
	var nums [3]float64
	for i := range nums {
		v, err := strconv.ParseFloat(f[2+i], 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("perftest: result row %q: field %d %q is not a rate", t, 3+i, f[2+i])
		}
		nums[i] = v
	}
	scale := 1.0
	if r.Unit == "MB/sec" {
		scale = float64(1<<20) * 8 / 1e9
	}
	r.PeakGbps, r.AvgGbps, r.MsgRateMpps = nums[0]*scale, nums[1]*scale, nums[2]
	return nil
}
