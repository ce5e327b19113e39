package gpu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DCGMDiag is what `dcgmi diag -r N` reported, from either its table
// output or its `-j` JSON (DCGM 3.x "DCGM GPU Diagnostic" and DCGM 4.x
// "DCGM Diagnostic" documents).
type DCGMDiag struct {
	Version      string
	RuntimeError string
	Tests        []DCGMTest
	// Serials are the GPU serial numbers DCGM 4.x lists per GPU id
	// (entity_groups), what ties DCGM's GPU ids to NVML's devices.
	Serials map[int]string
}

// DCGMTest is one diagnostic test ("PCIe", "GPU Memory", "Targeted Stress"
// in DCGM 3.x; "pcie", "memory", "targeted_stress" in DCGM 4.x).
type DCGMTest struct {
	Category string
	Name     string
	Results  []DCGMResult
	// Summary is DCGM 4.x's test_summary status ("" when absent).
	Summary Status
}

// DCGMResult is a test's outcome for some GPUs.
type DCGMResult struct {
	GPUs     []int  // nil: every GPU in the run ("All", or a node-wide test)
	Status   Status // Pass, Fail, Skip; DCGM's WARN maps to Pass with the warning kept
	Warn     bool
	Messages []string
	// Errors are DCGM's own error records (JSON warnings with an error_id),
	// in DCGM's words.
	Errors []DCGMError
}

// DCGMError is one error DCGM reported for a result: its dcgmError_t code
// (dcgm_errors.h), category and severity, and its message.
type DCGMError struct {
	ID       int
	Category int
	Severity int
	Message  string
}

// String is DCGM's message with the code's name: "DCGM_FR_PCI_REPLAY_RATE
// (error 3): Detected more than 8 PCIe replays ...".
func (e DCGMError) String() string {
	return fmt.Sprintf("%s (error %d, %s): %s", DCGMErrorName(e.ID), e.ID, dcgmSeverity(e.Severity), e.Message)
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

// dcgmJSONResult is one entry of a test's results, in either version:
// DCGM 3.x names GPUs with gpu_ids (a number, or a CSV string for
// node-wide tests) or gpu_id; DCGM 4.x with entity_group "GPU" and
// entity_id, and leaves them out for a result about no entity.
type dcgmJSONResult struct {
	GPUIDs      json.RawMessage   `json:"gpu_ids"`
	GPUID       json.RawMessage   `json:"gpu_id"`
	EntityGroup *string           `json:"entity_group"`
	EntityID    *int              `json:"entity_id"`
	Status      string            `json:"status"`
	Warnings    []json.RawMessage `json:"warnings"`
	Info        []json.RawMessage `json:"info"`
}

type dcgmJSONDiag struct {
	Version    string `json:"version"`
	RuntimeErr string `json:"runtime_error"`
	Categories []struct {
		Category string `json:"category"`
		Tests    []*struct {
			Name    string           `json:"name"`
			Results []dcgmJSONResult `json:"results"`
			Summary *struct {
				Status string `json:"status"`
			} `json:"test_summary"`
		} `json:"tests"`
	} `json:"test_categories"`
}

// parseDCGMJSON follows dcgmi's JSON writers. DCGM 3.x (NvvsCommon.h):
// {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
// [{"name", "results": [{"gpu_ids", "status", "warnings", "info"}]}]}],
// "version"}}. DCGM 4.x (dcgmi/Diag.cpp, NvvsJsonStrings.h): {"DCGM
// Diagnostic": {"test_categories": [{"category", "tests": [{"name",
// "results": [{"entity_group", "entity_group_id", "entity_id", "status",
// "warnings": [{"warning", "error_id", "error_category",
// "error_severity"}], "info"}], "test_summary": {"status"}}]}]},
// "entity_groups": [{"entity_group", "entities": [{"entity_id",
// "serial_num", "device_id"}]}], "metadata": {"version", "Driver Version
// Detected"}}. Warnings are strings (older) or objects; tests may be null;
// a WARN result reads "Warn" in 3.x and "Fail" in 4.x's JSON.
func parseDCGMJSON(doc []byte) (*DCGMDiag, error) {
	var top struct {
		V3         *dcgmJSONDiag `json:"DCGM GPU Diagnostic"`
		V4         *dcgmJSONDiag `json:"DCGM Diagnostic"`
		RuntimeErr string        `json:"runtime_error"`
		Metadata   *struct {
			Version string `json:"version"`
		} `json:"metadata"`
		EntityGroups []struct {
			Group    string `json:"entity_group"`
			Entities []struct {
				ID     int    `json:"entity_id"`
				Serial string `json:"serial_num"`
			} `json:"entities"`
		} `json:"entity_groups"`
	}
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("dcgmi diag JSON: %w", err)
	}
	diag := top.V4
	if diag == nil {
		diag = top.V3
	}
	if diag == nil {
		if top.RuntimeErr != "" {
			return &DCGMDiag{RuntimeError: top.RuntimeErr}, nil
		}
		return nil, fmt.Errorf("dcgmi diag JSON: no \"DCGM Diagnostic\" (DCGM 4) or \"DCGM GPU Diagnostic\" (DCGM 3) object")
	}
	d := &DCGMDiag{Version: diag.Version, RuntimeError: diag.RuntimeErr}
	if top.Metadata != nil && top.Metadata.Version != "" {
		d.Version = top.Metadata.Version
	}
	for _, g := range top.EntityGroups {
		if g.Group != "GPU" {
			continue
		}
		for _, e := range g.Entities {
			if e.Serial != "" && e.ID >= 0 {
				if d.Serials == nil {
					d.Serials = map[int]string{}
				}
				d.Serials[e.ID] = e.Serial
			}
		}
	}
	for ci, c := range diag.Categories {
		for ti, t := range c.Tests {
			if t == nil {
				continue
			}
			test := DCGMTest{Category: c.Category, Name: t.Name}
			if t.Summary != nil && t.Summary.Status != "" {
				st, _, err := dcgmStatus(t.Summary.Status)
				if err != nil {
					return nil, fmt.Errorf("dcgmi diag JSON: test_categories[%d].tests[%d].test_summary.status: %w", ci, ti, err)
				}
				test.Summary = st
			}
			for ri, r := range t.Results {
				where := fmt.Sprintf("test_categories[%d].tests[%d].results[%d]", ci, ti, ri)
				res, keep, err := jsonResult(r)
				if err != nil {
					return nil, fmt.Errorf("dcgmi diag JSON: %s.%w", where, err)
				}
				if keep {
					test.Results = append(test.Results, res)
				}
			}
			d.Tests = append(d.Tests, test)
		}
	}
	return d, nil
}

// jsonResult reads one result; keep is false for a result about another
// kind of entity (a CPU, an NVSwitch) than a GPU.
func jsonResult(r dcgmJSONResult) (res DCGMResult, keep bool, err error) {
	st, warn, err := dcgmStatus(r.Status)
	if err != nil {
		return res, false, fmt.Errorf("status: %w", err)
	}
	res = DCGMResult{Status: st, Warn: warn}
	switch {
	case r.EntityGroup != nil:
		if *r.EntityGroup != "GPU" {
			return res, false, nil
		}
		if r.EntityID == nil || *r.EntityID < 0 {
			return res, false, errors.New("entity_id: a GPU result without a GPU id")
		}
		res.GPUs = []int{*r.EntityID}
	default:
		ids := r.GPUIDs
		if len(ids) == 0 {
			ids = r.GPUID
		}
		if res.GPUs, err = jsonGPUIDs(ids); err != nil {
			return res, false, fmt.Errorf("gpu_ids: %w", err)
		}
	}
	for _, m := range r.Warnings {
		if e, ok := jsonError(m); ok {
			res.Errors = append(res.Errors, e)
		} else if s := jsonMessage(m); s != "" {
			res.Messages = append(res.Messages, s)
		}
	}
	for _, m := range r.Info {
		if s := jsonMessage(m); s != "" {
			res.Messages = append(res.Messages, s)
		}
	}
	return res, true, nil
}

// jsonError reads a warning object that carries DCGM's error code.
func jsonError(raw json.RawMessage) (DCGMError, bool) {
	var o struct {
		Warning  *string `json:"warning"`
		ID       *int    `json:"error_id"`
		Category int     `json:"error_category"`
		Severity int     `json:"error_severity"`
	}
	if json.Unmarshal(raw, &o) != nil || o.Warning == nil || o.ID == nil {
		return DCGMError{}, false
	}
	return DCGMError{ID: *o.ID, Category: o.Category, Severity: o.Severity, Message: *o.Warning}, true
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

// DCGMTarget is a GPU the diagnostic ran on: DCGM's GPU id (NVML's index
// order) and the component its verdicts name; Serial, when known, is
// NVML's serial, which DCGM 4.x lists per GPU id, so a diagnostic whose ids
// differ from NVML's order still names the right board.
type DCGMTarget struct {
	ID        int
	Component string
	Serial    string
}

// Targets names GPUs 0..n-1 gpu/0..gpu/n-1.
func Targets(n int) []DCGMTarget {
	out := make([]DCGMTarget, n)
	for i := range out {
		out[i] = DCGMTarget{ID: i, Component: "gpu/" + strconv.Itoa(i)}
	}
	return out
}

// DCGMCheck is the verdict check name of one DCGM test: "dcgm/pcie",
// "dcgm/targeted_stress", "dcgm/gpu_memory".
func DCGMCheck(test string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(test) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			under = false
		} else if !under && b.Len() > 0 {
			b.WriteByte('_')
			under = true
		}
	}
	return "dcgm/" + strings.TrimSuffix(b.String(), "_")
}

// Verdicts gives one verdict per GPU and test DCGM ran on it (check
// DCGMCheck(test)): FAIL with DCGM's error codes and its own messages,
// PASS (warnings kept in the message) or SKIP. A GPU no test ran on gets
// one SKIP (check dcgm_diag); a failed result about a GPU id no target has,
// or about no GPU at all, fails component "gpu"; a runtime error is one
// ERROR on "gpu".
func (d *DCGMDiag) Verdicts(targets []DCGMTarget) []Verdict {
	const want = "Pass"
	version := "DCGM"
	if d.Version != "" {
		version = "DCGM " + d.Version
	}
	if d.RuntimeError != "" {
		return []Verdict{{Component: "gpu", Check: CheckDCGMDiag, Status: Error, Expected: "every test " + want,
			Message: version + " dcgmi diag: " + d.RuntimeError}}
	}
	byID := d.resolve(targets)
	var out []Verdict
	ran := map[string]bool{}
	for _, t := range d.Tests {
		check := DCGMCheck(t.Name)
		where := t.Name
		if t.Category != "" {
			where = t.Category + "/" + t.Name
		}
		for _, tg := range targets {
			id, ok := byID[tg.Component]
			if !ok {
				continue
			}
			v, any := testVerdict(t, id, tg.Component)
			if !any {
				continue
			}
			v.Check, v.Expected = check, want
			v.Message = strings.TrimSuffix(version+" "+where+": "+v.Message, ": ")
			out = append(out, v)
			ran[tg.Component] = ran[tg.Component] || v.Status != Skip
		}
		// Failures the per-GPU verdicts do not carry.
		var lost []string
		known := map[int]bool{}
		for _, id := range byID {
			known[id] = true
		}
		for _, r := range t.Results {
			if r.Status != Fail {
				continue
			}
			for _, g := range r.GPUs {
				if !known[g] {
					lost = append(lost, fmt.Sprintf("DCGM GPU %d, which is not among the GPUs checked: %s", g, resultText(r, g)))
				}
			}
		}
		if len(t.Results) == 0 && t.Summary == Fail {
			lost = append(lost, "the test failed with no per-GPU result")
		}
		if len(lost) > 0 {
			out = append(out, Verdict{Component: "gpu", Check: check, Status: Fail, Observed: "Fail", Expected: want,
				Message: version + " " + where + ": " + strings.Join(lost, "; ")})
		}
	}
	for _, tg := range targets {
		if !ran[tg.Component] {
			out = append(out, Verdict{Component: tg.Component, Check: CheckDCGMDiag, Status: Skip, Observed: "no test ran",
				Expected: "every test " + want, Message: version + " ran no test on this GPU"})
		}
	}
	return out
}

// resolve maps each target's component to its DCGM GPU id: by serial
// where DCGM listed serials and the target has one, else the target's ID.
func (d *DCGMDiag) resolve(targets []DCGMTarget) map[string]int {
	bySerial := map[string]int{}
	for id, s := range d.Serials {
		bySerial[s] = id
	}
	out := map[string]int{}
	for _, tg := range targets {
		if id, ok := bySerial[tg.Serial]; ok && tg.Serial != "" {
			out[tg.Component] = id
			continue
		}
		out[tg.Component] = tg.ID
	}
	return out
}

// testVerdict judges test t for DCGM GPU id; any is false when no result
// of t is about that GPU.
func testVerdict(t DCGMTest, id int, comp string) (v Verdict, any bool) {
	v = Verdict{Component: comp}
	fail, warn, skips, n := false, false, 0, 0
	var msgs []string
	for _, r := range t.Results {
		if r.GPUs != nil && !slices.Contains(r.GPUs, id) {
			continue
		}
		n++
		switch {
		case r.Status == Fail:
			fail = true
		case r.Status == Skip:
			skips++
		case r.Warn:
			warn = true
		}
		if m := resultText(r, id); m != "" {
			msgs = append(msgs, m)
		}
	}
	if n == 0 {
		return v, false
	}
	switch {
	case fail:
		v.Status, v.Observed = Fail, "Fail"
	case skips == n:
		v.Status, v.Observed = Skip, "Skip"
	case warn:
		v.Status, v.Observed = Pass, "Warn"
	default:
		v.Status, v.Observed = Pass, "Pass"
	}
	v.Message = strings.Join(msgs, "; ")
	return v, true
}

// resultText is what DCGM said about GPU g in r: its error records, then
// the messages that are not about another GPU.
func resultText(r DCGMResult, g int) string {
	var parts []string
	for _, e := range r.Errors {
		if len(forGPU([]string{e.Message}, g)) > 0 {
			parts = append(parts, e.String())
		}
	}
	parts = append(parts, forGPU(r.Messages, g)...)
	return strings.Join(parts, " / ")
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

// TargetsFor names the GPUs NVML sees as Collect names them (by position
// in exp.BusIDs when given, else by NVML index), with their serials, for a
// DCGM diagnostic that runs as Collect's load. A GPU that cannot be opened
// is left out: Collect reports it.
func TargetsFor(lib Library, exp Expect) []DCGMTarget {
	n, err := lib.DeviceCount()
	if err != nil {
		return nil
	}
	pos := map[string]int{}
	for j, b := range exp.BusIDs {
		pos[NormalizeBusID(b)] = j
	}
	var out []DCGMTarget
	for i := range n {
		dev, err := lib.DeviceByIndex(i)
		if err != nil {
			continue
		}
		t := DCGMTarget{ID: i, Component: "gpu/" + strconv.Itoa(i)}
		if pci, err := dev.PCI(); err == nil && len(exp.BusIDs) > 0 {
			bus := NormalizeBusID(pci.BusID)
			if j, ok := pos[bus]; ok {
				t.Component = "gpu/" + strconv.Itoa(j)
			} else {
				t.Component = "gpu/" + bus
			}
		}
		t.Serial, _ = dev.Serial()
		out = append(out, t)
	}
	return out
}
