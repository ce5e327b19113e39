package fio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseRandRead2Drives: one job per drive, read side measured, the
// write side empty, p99 from the clat percentiles.
func TestParseRandRead2Drives(t *testing.T) {
	r, err := Parse(load(t, "randread-2drives.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "fio-3.33" || len(r.Jobs) != 2 {
		t.Fatalf("version %q, %d jobs", r.Version, len(r.Jobs))
	}
	for _, c := range []struct {
		name     string
		iops     float64
		p50, p99 float64
		ios      int64
	}{
		{"loop0", 162746.084638, 116.224, 2244.608, 488401},
		{"loop1", 176997.334222, 112.128, 2007.040, 531169},
	} {
		j, ok := r.Job(c.name)
		if !ok {
			t.Fatalf("job %s missing", c.name)
		}
		if j.Error != 0 || j.Read.IOPS != c.iops || j.Read.TotalIOs != c.ios {
			t.Errorf("%s: error %d iops %v ios %d, want 0 %v %d", c.name, j.Error, j.Read.IOPS, j.Read.TotalIOs, c.iops, c.ios)
		}
		if p, ok := j.Read.Clat.PercentileUs(99); !ok || p != c.p99 {
			t.Errorf("%s: p99 %v %v, want %v us", c.name, p, ok, c.p99)
		}
		if p, ok := j.Read.Clat.PercentileUs(50); !ok || p != c.p50 {
			t.Errorf("%s: p50 %v %v, want %v us", c.name, p, ok, c.p50)
		}
		if _, ok := j.Write.Clat.PercentileUs(99); ok || j.Write.IOPS != 0 {
			t.Errorf("%s: a read-only job reports write I/O", c.name)
		}
		// bw_bytes is bytes/s of 4 KiB reads: IOPS x 4096 within rounding.
		if bw := j.Read.IOPS * 4096; j.Read.BWBytes < bw*0.99 || j.Read.BWBytes > bw*1.01 {
			t.Errorf("%s: bw_bytes %v, IOPS x 4 KiB = %v", c.name, j.Read.BWBytes, bw)
		}
	}
	if _, ok := r.Job("loop2"); ok {
		t.Error("Job found a job that is not there")
	}
}

func TestParseJobError(t *testing.T) {
	r, err := Parse(load(t, "randread-missing-device.json"))
	if err != nil {
		t.Fatal(err)
	}
	j, ok := r.Job("sdz")
	if !ok || j.Error != 22 || j.Read.TotalIOs != 0 {
		t.Errorf("job %+v, want sdz with error 22 and no I/O", j)
	}
}

func TestParseScratchWrite(t *testing.T) {
	r, err := Parse(load(t, "randwrite-scratch.json"))
	if err != nil {
		t.Fatal(err)
	}
	j := r.Jobs[0]
	if j.Write.IOPS != 197887.778888 || j.Write.TotalIOs != 594257 || j.Read.IOPS != 0 {
		t.Errorf("write IOPS %v read IOPS %v", j.Write.IOPS, j.Read.IOPS)
	}
	if p, ok := j.Write.Clat.PercentileUs(99.9); !ok || p != 4358.144 {
		t.Errorf("write p99.9 %v %v", p, ok)
	}
}

func TestParseRejects(t *testing.T) {
	good := load(t, "randread-2drives.json")
	for name, in := range map[string][]byte{
		"refused by --readonly (no JSON)": load(t, "readonly-refuses-write.stdout"),
		"empty":                           nil,
		"truncated":                       good[:len(good)/2],
		"trailing data":                   append(append([]byte{}, good...), []byte(`{"jobs":[]}`)...),
		"no jobs":                         []byte(`{"fio version":"fio-3.33","jobs":[]}`),
		"negative iops":                   []byte(`{"jobs":[{"jobname":"a","read":{"iops":-1}}]}`),
		"bad percentile key":              []byte(`{"jobs":[{"jobname":"a","read":{"clat_ns":{"percentile":{"p99":1}}}}]}`),
		"too big":                         make([]byte, MaxReport+1),
	} {
		if _, err := Parse(in); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// Notes printed ahead of the JSON are skipped.
	withNote := append([]byte("note: both iodepth >= 1 and synchronous I/O engine are selected\n"), good...)
	if r, err := Parse(withNote); err != nil || len(r.Jobs) != 2 {
		t.Errorf("report after a note line: %v", err)
	}
	if !strings.Contains(errString(Parse(nil)), "no JSON") {
		t.Error("empty output: error does not say there is no JSON")
	}
}

func errString(_ *Report, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
