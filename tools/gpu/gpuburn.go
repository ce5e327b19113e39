package gpu

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// GPUBurn is what gpu-burn (github.com/wilicc/gpu-burn) printed. gpu-burn
// exits 0 even when it marks a GPU FAULTY, so only its output tells.
//
// Format (gpu_burn-drv.cpp, listenClients): progress lines separated by
// '\r' of the form
//
//	"50.0%  proc'd: 3204 (18433 Gflop/s) - 3180 (18201 Gflop/s)   errors: 0 - 12  (WARNING!)- 0  (DIED!)  temps: 56 C - 54 C ..."
//
// where each error count is the count since the last "Summary at:" line
// (the counters reset there), then "Tested N GPUs:" and one "\tGPU i: OK" or
// "\tGPU i: FAULTY" line per GPU. GPU i is the CUDA device index: run it with
// CUDA_DEVICE_ORDER=PCI_BUS_ID so it matches NVML's order.
type GPUBurn struct {
	GPUs      []GPUBurnGPU // by index
	Completed bool         // the "Tested N GPUs:" summary was printed
	Aborted   string       // gpu-burn's abort message, if any
}

// GPUBurnGPU is one GPU's result.
type GPUBurnGPU struct {
	Index  int
	Result string // "OK", "FAULTY", or "" when the summary never came
	Errors int    // computation errors counted over the whole run
	Died   bool   // its worker process died ("(DIED!)")
}

// maxBurnGPUs bounds the GPU indexes and counts gpu-burn output may name.
const maxBurnGPUs = 1024

// ParseGPUBurn reads gpu-burn's output.
func ParseGPUBurn(r io.Reader) (*GPUBurn, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading gpu-burn output: %w", err)
	}
	out := &GPUBurn{}
	// Callers bound i by maxBurnGPUs: the output names GPUs by index, and
	// an index is not a reason to allocate millions of entries.
	gpu := func(i int) *GPUBurnGPU {
		for len(out.GPUs) <= i {
			out.GPUs = append(out.GPUs, GPUBurnGPU{Index: len(out.GPUs)})
		}
		return &out.GPUs[i]
	}
	var window []int // errors per GPU since the last summary
	flush := func() {
		for i, n := range window {
			// Saturate: a sum that wrapped negative would read as "0 errors".
			g := gpu(i)
			g.Errors = min(g.Errors, math.MaxInt-n) + n
		}
		window = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	sc.Split(splitCRLF)
	tested := -1
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		switch {
		case strings.Contains(s, "proc'd:") && strings.Contains(s, "errors:"):
			seg := s[strings.Index(s, "errors:")+len("errors:"):]
			if i := strings.Index(seg, "temps:"); i >= 0 {
				seg = seg[:i]
			}
			fields := strings.Split(seg, "-")
			if len(fields) > maxBurnGPUs {
				return nil, fmt.Errorf("gpu-burn output line %d: %d error counts: expected at most one per GPU (%d)", line, len(fields), maxBurnGPUs)
			}
			window = make([]int, len(fields))
			for i, f := range fields {
				f = strings.TrimSpace(f)
				num, _, _ := strings.Cut(f, " ")
				n, err := strconv.Atoi(num)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("gpu-burn output line %d: error count %d is %q, not a number", line, i, num)
				}
				window[i] = n
				if strings.Contains(f, "DIED") {
					gpu(i).Died = true
				}
			}
		case strings.HasPrefix(s, "Summary at:"):
			flush()
		case strings.HasPrefix(s, "Tested ") && strings.HasSuffix(s, "GPUs:"):
			n, err := strconv.Atoi(strings.Fields(s)[1])
			if err != nil || n < 0 || n > maxBurnGPUs {
				return nil, fmt.Errorf("gpu-burn output line %d: %q: GPU count is not a number from 0 to %d", line, s, maxBurnGPUs)
			}
			tested = n
			out.Completed = true
		case tested >= 0 && strings.HasPrefix(s, "GPU "):
			idx, res, ok := strings.Cut(strings.TrimPrefix(s, "GPU "), ":")
			i, err := strconv.Atoi(idx)
			res = strings.TrimSpace(res)
			if !ok || err != nil || (res != "OK" && res != "FAULTY") {
				return nil, fmt.Errorf("gpu-burn output line %d: %q: expected \"GPU <n>: OK|FAULTY\"", line, s)
			}
			if i < 0 || i >= maxBurnGPUs {
				return nil, fmt.Errorf("gpu-burn output line %d: %q: GPU index %d: expected 0-%d", line, s, i, maxBurnGPUs-1)
			}
			// One result per GPU: a later "OK" must not hide a "FAULTY".
			if g := gpu(i); g.Result != "" {
				return nil, fmt.Errorf("gpu-burn output line %d: %q: GPU %d already reported %s", line, s, i, g.Result)
			}
			gpu(i).Result = res
		case strings.Contains(s, "No clients are alive!"):
			out.Aborted = strings.ToValidUTF8(s, "\uFFFD")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading gpu-burn output: %w", err)
	}
	flush()
	if out.Completed && len(out.GPUs) < tested {
		gpu(tested - 1)
	}
	return out, nil
}

func splitCRLF(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// Verdicts gives one gpu_burn verdict per GPU (component gpu/<index>), or a
// single ERROR on "gpu" when the run never reached its summary.
func (b *GPUBurn) Verdicts() []Verdict {
	if !b.Completed {
		msg := "gpu-burn ended without its \"Tested N GPUs\" summary"
		if b.Aborted != "" {
			msg += ": " + b.Aborted
		}
		var died []string
		for _, g := range b.GPUs {
			if g.Died {
				died = append(died, "gpu/"+strconv.Itoa(g.Index))
			}
		}
		if len(died) > 0 {
			msg += "; worker died on " + strings.Join(died, ", ")
		}
		return []Verdict{{Component: "gpu", Check: CheckGPUBurn, Status: Error, Expected: "completed run", Message: msg}}
	}
	if len(b.GPUs) == 0 {
		// "Tested 0 GPUs:": no per-GPU verdict would say anything ran.
		return []Verdict{{Component: "gpu", Check: CheckGPUBurn, Status: Error, Expected: "completed run", Message: "gpu-burn tested no GPU"}}
	}
	var out []Verdict
	for _, g := range b.GPUs {
		v := Verdict{Component: "gpu/" + strconv.Itoa(g.Index), Check: CheckGPUBurn, Expected: "OK, 0 errors",
			Observed: fmt.Sprintf("%s, %d errors", cmp(g.Result, "no result"), g.Errors)}
		var bad []string
		if g.Result != "OK" {
			bad = append(bad, "gpu-burn marked it "+cmp(g.Result, "(no line in the summary)"))
		}
		if g.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%d wrong results from the matrix multiply comparison", g.Errors))
		}
		if g.Died {
			bad = append(bad, "its worker process died")
		}
		v.Status = Pass
		if len(bad) > 0 {
			v.Status, v.Message = Fail, strings.Join(bad, "; ")
		}
		out = append(out, v)
	}
	return out
}

func cmp(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
