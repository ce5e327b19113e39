// Package fio reads fio's JSON report (--output-format=json), the parts CURE
// judges: per job its error, and per direction the IOPS, bandwidth, I/O
// count and completion-latency percentiles. It runs nothing; checks build
// the command line and hand the output here. The input comes from a tool
// on the node, so it is parsed strictly and bounded (FuzzParse).
package fio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MaxReport bounds the report read: fio's JSON is a few KiB per job.
const MaxReport = 4 << 20

// Report is one fio run.
type Report struct {
	Version string `json:"fio version"`
	Jobs    []Job  `json:"jobs"`
}

// Job is one job of the run (one --name section).
type Job struct {
	Name string `json:"jobname"`
	// Error is the errno the job stopped on (0: none), e.g. 22 when the
	// file could not be sized.
	Error int `json:"error"`
	Read  IO  `json:"read"`
	Write IO  `json:"write"`
}

// IO is one direction of a job.
type IO struct {
	IOBytes  int64   `json:"io_bytes"`
	BWBytes  float64 `json:"bw_bytes"` // bytes per second
	IOPS     float64 `json:"iops"`
	Runtime  int64   `json:"runtime"` // milliseconds
	TotalIOs int64   `json:"total_ios"`
	// Clat is the completion latency (submission to completion), the one
	// fio reports percentiles of by default.
	Clat Latency `json:"clat_ns"`
	Lat  Latency `json:"lat_ns"`
}

// Latency is one latency distribution in nanoseconds.
type Latency struct {
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	N    int64   `json:"N"`
	// Percentile maps fio's keys ("99.000000") to nanoseconds; present
	// only when the job had I/O in this direction.
	Percentile map[string]float64 `json:"percentile"`
}

// PercentileUs returns the p-th percentile in microseconds, if fio
// reported it (--percentile_list must name it).
func (l Latency) PercentileUs(p float64) (float64, bool) {
	v, ok := l.Percentile[strconv.FormatFloat(p, 'f', 6, 64)]
	if !ok {
		return 0, false
	}
	return v / 1000, true
}

// Parse reads fio's JSON report. Lines before the JSON object (fio prints
// some notes to stdout ahead of it) are skipped; anything after it, or a
// report with no job, is an error.
func Parse(b []byte) (*Report, error) {
	if len(b) > MaxReport {
		return nil, fmt.Errorf("fio: report of %d bytes is over the %d-byte bound", len(b), MaxReport)
	}
	start := 0
	for start < len(b) && b[start] != '{' {
		nl := bytes.IndexByte(b[start:], '\n')
		if nl < 0 {
			start = len(b)
			break
		}
		start += nl + 1
	}
	if start >= len(b) {
		return nil, errors.New("fio: no JSON report in the output")
	}
	d := json.NewDecoder(bytes.NewReader(b[start:]))
	var r Report
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("fio: JSON report: %w", err)
	}
	if d.More() {
		return nil, errors.New("fio: data after the JSON report")
	}
	if len(r.Jobs) == 0 {
		return nil, errors.New("fio: the report has no job")
	}
	for i, j := range r.Jobs {
		for _, io := range []struct {
			dir string
			io  IO
		}{{"read", j.Read}, {"write", j.Write}} {
			if err := io.io.check(); err != nil {
				return nil, fmt.Errorf("fio: jobs[%d] (%s) %s: %w", i, j.Name, io.dir, err)
			}
		}
	}
	return &r, nil
}

func (io IO) check() error {
	if io.IOBytes < 0 || io.TotalIOs < 0 || io.Runtime < 0 || io.Clat.N < 0 {
		return errors.New("negative count")
	}
	for _, v := range []float64{io.BWBytes, io.IOPS, io.Clat.Min, io.Clat.Max, io.Clat.Mean, io.Lat.Mean} {
		if v < 0 || math.IsInf(v, 0) {
			return fmt.Errorf("rate or latency %v out of range", v)
		}
	}
	for k, v := range io.Clat.Percentile {
		if _, err := strconv.ParseFloat(k, 64); err != nil || v < 0 {
			return fmt.Errorf("percentile %q=%v malformed", k, v)
		}
	}
	return nil
}

// Job returns the job named name.
func (r *Report) Job(name string) (Job, bool) {
	for _, j := range r.Jobs {
		if j.Name == name {
			return j, true
		}
	}
	return Job{}, false
}
