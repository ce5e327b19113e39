package gpu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DCGMDiag is what `dcgmi diag -r N` reported, from either its table
// output or its `-j` JSON.
type DCGMDiag struct {
	Version      string
	RuntimeError string
	Tests        []DCGMTest
}

// DCGMTest is one diagnostic test ("PCIe", "GPU Memory", "Targeted Stress").
type DCGMTest struct {
	Category string
	Name     string
	Results  []DCGMResult
}

// DCGMResult is a test's outcome for some GPUs.
type DCGMResult struct {
	GPUs     []int  // nil: every GPU in the run ("All", or a node-wide test)
	Status   Status // Pass, Fail, Skip; DCGM's WARN maps to Pass with the warning kept
	Warn     bool
	Messages []string
}

// ParseDCGMDiag reads dcgmi diag output; it detects JSON (-j) by its first
// '{' and otherwise parses the table.
func ParseDCGMDiag(out []byte) (*DCGMDiag, error) {
	t := bytes.TrimSpace(out)
	// dcgmi may print a warning line before the JSON document.
	if i := bytes.IndexByte(t, '{'); i >= 0 && bytes.HasSuffix(t, []byte("}")) {
		return parseDCGMJSON(t[i:])
	}
	return parseDCGMTable(out)
}

func dcgmStatus(s string) (Status, bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pass":
		return Pass, false, nil
	case "warn", "warning":
		return Pass, true, nil
	case "fail":
		return Fail, false, nil
	case "skip", "skipped", "not run", "notrun":
		return Skip, false, nil
	}
	return "", false, fmt.Errorf("unknown status %q (want Pass, Fail, Warn or Skip)", s)
}

// parseDCGMJSON follows NVVS's JSON writer (dcgm NvvsCommon.h): {"DCGM GPU
// Diagnostic": {"test_categories": [{"category", "tests": [{"name",
// "results": [{"gpu_ids", "status", "warnings", "info"}]}]}], "version"}}.
// gpu_ids is a number per GPU, or a CSV string for node-wide tests; warnings
// are strings (older) or objects with "warning"/"message" (3.x/4.x); tests
// may contain nulls.
func parseDCGMJSON(doc []byte) (*DCGMDiag, error) {
	var top struct {
		Diag *struct {
			Version    string `json:"version"`
			RuntimeErr string `json:"runtime_error"`
			Categories []struct {
				Category string `json:"category"`
				Tests    []*struct {
					Name    string `json:"name"`
					Results []struct {
						GPUIDs   json.RawMessage   `json:"gpu_ids"`
						GPUID    json.RawMessage   `json:"gpu_id"`
						Status   string            `json:"status"`
						Warnings []json.RawMessage `json:"warnings"`
						Info     []json.RawMessage `json:"info"`
					} `json:"results"`
				} `json:"tests"`
			} `json:"test_categories"`
		} `json:"DCGM GPU Diagnostic"`
		RuntimeErr string `json:"runtime_error"`
	}
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("dcgmi diag JSON: %w", err)
	}
	if top.Diag == nil {
		if top.RuntimeErr != "" {
			return &DCGMDiag{RuntimeError: top.RuntimeErr}, nil
		}
		return nil, fmt.Errorf("dcgmi diag JSON: no \"DCGM GPU Diagnostic\" object")
	}
	d := &DCGMDiag{Version: top.Diag.Version, RuntimeError: top.Diag.RuntimeErr}
	for ci, c := range top.Diag.Categories {
		for ti, t := range c.Tests {
			if t == nil {
				continue
			}
			test := DCGMTest{Category: c.Category, Name: t.Name}
			for ri, r := range t.Results {
				where := fmt.Sprintf("test_categories[%d].tests[%d].results[%d]", ci, ti, ri)
				st, warn, err := dcgmStatus(r.Status)
				if err != nil {
					return nil, fmt.Errorf("dcgmi diag JSON: %s.status: %w", where, err)
				}
				ids := r.GPUIDs
				if len(ids) == 0 {
					ids = r.GPUID
				}
				gpus, err := jsonGPUIDs(ids)
				if err != nil {
					return nil, fmt.Errorf("dcgmi diag JSON: %s.gpu_ids: %w", where, err)
				}
				res := DCGMResult{GPUs: gpus, Status: st, Warn: warn}
				for _, m := range append(slices.Clone(r.Warnings), r.Info...) {
					if s := jsonMessage(m); s != "" {
						res.Messages = append(res.Messages, s)
					}
				}
				test.Results = append(test.Results, res)
			}
			d.Tests = append(d.Tests, test)
		}
	}
	return d, nil
}

func jsonGPUIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 0 {
			return nil, fmt.Errorf("GPU id %d is negative", n)
		}
		return []int{n}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%s is neither a number nor a string", raw)
	}
	return gpuList(s)
}

// gpuList parses "0,1,2", "0, 1, 2" or "All" (nil).
func gpuList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "all") {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		// A negative id matches no GPU: its failure would be dropped.
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("GPU list %q: %q is not a GPU id", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func jsonMessage(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o map[string]any
	if json.Unmarshal(raw, &o) == nil {
		for _, k := range []string{"warning", "message", "info"} {
			if v, ok := o[k].(string); ok {
				return v
			}
		}
	}
	return ""
}

// parseDCGMTable reads the boxed table dcgmi prints without -j:
//
//	|-----  Deployment  --------+------------------------------------------------|
//	| Denylist                  | Pass                                           |
//	+-----  Integration  -------+------------------------------------------------+
//	| PCIe                      | Pass - GPUs: 0, 1, 2, 4, 5, 6, 7               |
//	|                           | Fail - GPU: 3                                  |
//	| Warning                   | GPU 3 Found 12 PCIe replays ...                |
//
// Category rows start with "|-----" or "+-----"; a row with an empty first
// column continues the previous test; "Warning"/"Info" rows attach to the
// last result. The Metadata category carries versions, not results.
func parseDCGMTable(out []byte) (*DCGMDiag, error) {
	d := &DCGMDiag{}
	// Messages quote the driver and the GPUs: keep them UTF-8 for protobuf
	// (the JSON decoder already does).
	out = []byte(strings.ToValidUTF8(string(out), "\uFFFD"))
	sc := bufio.NewScanner(bytes.NewReader(out))
	category := ""
	var test *DCGMTest
	line := 0
	sawTable := false
	for sc.Scan() {
		line++
		s := strings.TrimRight(sc.Text(), " \t")
		switch {
		case strings.HasPrefix(s, "|-----") || strings.HasPrefix(s, "+-----"):
			name := strings.Trim(strings.SplitN(s[1:], "+", 2)[0], "- ")
			if name != "" {
				category = name
			}
			test = nil
			continue
		case strings.HasPrefix(s, "Error:") || strings.HasPrefix(s, "Error "):
			d.RuntimeError = strings.TrimSpace(s)
			continue
		case !strings.HasPrefix(s, "|"):
			continue
		}
		cols := strings.Split(strings.Trim(s, "|"), "|")
		if len(cols) != 2 {
			continue
		}
		key, val := strings.TrimSpace(cols[0]), strings.TrimSpace(cols[1])
		if key == "Diagnostic" && val == "Result" {
			sawTable = true
			continue
		}
		if category == "Metadata" {
			if key == "DCGM Version" {
				d.Version = val
			}
			continue
		}
		switch key {
		case "Warning", "Info":
			if test == nil || len(test.Results) == 0 {
				return nil, fmt.Errorf("dcgmi diag output line %d: %s row before any result", line, key)
			}
			r := &test.Results[len(test.Results)-1]
			r.Messages = append(r.Messages, val)
			continue
		case "":
			if test == nil {
				// The wrapped tail of a long Warning/Info cell.
				continue
			}
		default:
			d.Tests = append(d.Tests, DCGMTest{Category: category, Name: key})
			test = &d.Tests[len(d.Tests)-1]
		}
		if val == "" {
			continue
		}
		res, err := tableResult(val)
		if err != nil {
			if key == "" && len(test.Results) > 0 {
				// Continuation of a wrapped message, not a result.
				r := &test.Results[len(test.Results)-1]
				if n := len(r.Messages); n > 0 {
					r.Messages[n-1] += " " + val
				}
				continue
			}
			return nil, fmt.Errorf("dcgmi diag output line %d: test %q: %w", line, test.Name, err)
		}
		test.Results = append(test.Results, res)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading dcgmi diag output: %w", err)
	}
	if !sawTable && d.RuntimeError == "" {
		return nil, fmt.Errorf("dcgmi diag output: no \"| Diagnostic | Result |\" table found")
	}
	return d, nil
}

// tableResult parses "Pass", "Pass - All", "Fail - GPU: 3", "Skip - GPUs: 0, 1".
func tableResult(val string) (DCGMResult, error) {
	status, rest, _ := strings.Cut(val, " - ")
	st, warn, err := dcgmStatus(status)
	if err != nil {
		return DCGMResult{}, err
	}
	res := DCGMResult{Status: st, Warn: warn}
	rest = strings.TrimSpace(rest)
	if _, list, ok := strings.Cut(rest, ":"); ok {
		if res.GPUs, err = gpuList(list); err != nil {
			return DCGMResult{}, err
		}
	}
	return res, nil
}

// Verdicts gives one dcgm_diag verdict per GPU index in gpus (the GPUs the
// diagnostic ran on, NVML order), naming every failed test.
func (d *DCGMDiag) Verdicts(gpus []int) []Verdict {
	const want = "every test Pass"
	if d.RuntimeError != "" {
		return []Verdict{{Component: "gpu", Check: CheckDCGMDiag, Status: Error, Expected: want, Message: "dcgmi diag: " + d.RuntimeError}}
	}
	var out []Verdict
	for _, g := range gpus {
		var fails, warns []string
		ran := 0
		for _, t := range d.Tests {
			for _, r := range t.Results {
				if r.GPUs != nil && !slices.Contains(r.GPUs, g) {
					continue
				}
				msgs := forGPU(r.Messages, g)
				switch {
				case r.Status == Fail:
					fails = append(fails, withMsgs(t.Name, msgs))
				case r.Warn:
					warns = append(warns, withMsgs(t.Name, msgs))
				}
				if r.Status != Skip {
					ran++
				}
			}
		}
		v := Verdict{Component: "gpu/" + strconv.Itoa(g), Check: CheckDCGMDiag, Expected: want}
		switch {
		case len(fails) > 0:
			v.Status, v.Observed, v.Message = Fail, "Fail: "+testNames(fails), strings.Join(fails, "; ")
		case ran == 0:
			v.Status, v.Observed, v.Message = Skip, "no test ran", "dcgmi diag skipped every test on this GPU"
		default:
			v.Status, v.Observed = Pass, fmt.Sprintf("%d results Pass", ran)
			if len(warns) > 0 {
				v.Message = "warnings: " + strings.Join(warns, "; ")
			}
		}
		out = append(out, v)
	}
	return out
}

// forGPU keeps messages about GPU g; DCGM prefixes per-GPU text "GPU <n> ".
func forGPU(msgs []string, g int) []string {
	var out []string
	for _, m := range msgs {
		rest, ok := strings.CutPrefix(m, "GPU ")
		if ok {
			num, _, _ := strings.Cut(rest, " ")
			if n, err := strconv.Atoi(strings.TrimRight(num, ":,")); err == nil && n != g {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

func withMsgs(name string, msgs []string) string {
	if len(msgs) == 0 {
		return name
	}
	return name + ": " + strings.Join(msgs, " / ")
}

func testNames(items []string) string {
	var names []string
	for _, s := range items {
		n, _, _ := strings.Cut(s, ":")
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}
