package render

import (
	"bytes"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/natural"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/net/html"
)

const t0 = int64(1_760_000_000_000) // 2025-10-09 08:53:20 UTC

func sampleReport() (*curev1.RunReport, []*curev1.TimelineEntry) {
	r := &curev1.RunReport{
		RunId: "run-42", NodeId: "rack3-u17", Mode: curev1.Mode_MODE_DIAGNOSTIC, Status: "failed",
		StartedUnixMs: t0, EndedUnixMs: t0 + 754_000, Reboots: 1, BootPath: "uefi-https",
		Message: "1 component failed: gpu/10 ecc",
		Phases: []*curev1.PhaseRecord{
			{Name: "inventory", Status: "ok", Attempts: 1, StartedUnixMs: t0 + 1000, EndedUnixMs: t0 + 3500, Message: "8 GPUs, 4 NVMe"},
			{Name: "gpu_diag", Status: "failed", Attempts: 2, StartedUnixMs: t0 + 4000, EndedUnixMs: t0 + 700_000, Message: "gpu/10: 12 uncorrectable ECC errors"},
			{Name: "nic_loopback", Status: "skipped", Attempts: 1, StartedUnixMs: t0 + 700_100, EndedUnixMs: t0 + 700_200, Message: "no loopback cable"},
		},
		// Deliberately unsorted: natural order and failures-first are the
		// renderer's job.
		Verdicts: []*curev1.Verdict{
			{Component: "gpu/2", Check: "ecc", Status: curev1.VerdictStatus_PASS, Observed: "0", Expected: "0"},
			{Component: "nic/0", Check: "loopback", Status: curev1.VerdictStatus_SKIP, Message: "no loopback cable"},
			{Component: "gpu/10", Check: "ecc", Status: curev1.VerdictStatus_FAIL, Observed: "12 uncorrectable", Expected: "0", Message: "retire the GPU & open an RMA"},
			{Component: "gpu/1", Check: "ecc", Status: curev1.VerdictStatus_PASS, Observed: "0", Expected: "0"},
			{Component: "nvme/0", Check: "smart", Status: curev1.VerdictStatus_PASS, Observed: "ok", Expected: "ok"},
		},
	}
	tl := []*curev1.TimelineEntry{
		{TimeUnixMs: t0, Kind: "info", Source: "coordinator", Message: "run started"},
		{TimeUnixMs: t0 + 4000, Phase: "gpu_diag", Kind: "phase_start", Source: "runner"},
		{TimeUnixMs: t0 + 5000, Phase: "gpu_diag", Kind: "metric", Source: "runner", Message: "gpu_temp_c=71"},
		{TimeUnixMs: t0 + 6000, Phase: "gpu_diag", Kind: "log", Status: "WARN", Source: "runner", Message: `dmesg: <script>alert("xss")</script> & more`},
		{TimeUnixMs: t0 + 700_000, Phase: "gpu_diag", Kind: "phase_end", Status: "failed", DurationMs: 696_000, Source: "runner", Message: "gpu/10 ECC"},
		{TimeUnixMs: t0 + 754_000, Kind: "run_end", Status: "failed", DurationMs: 754_000, Source: "coordinator", Message: "done"},
	}
	return r, tl
}

func render(t *testing.T) string {
	t.Helper()
	r, tl := sampleReport()
	var b bytes.Buffer
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0+800_000)); err != nil {
		t.Fatalf("writeHTML: %v", err)
	}
	return b.String()
}

// tableRows returns the text of each cell of each body row of the table
// with the given id.
func tableRows(t *testing.T, doc *html.Node, id string) [][]string {
	t.Helper()
	table := find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "table" && attr(n, "id") == id })
	if table == nil {
		t.Fatalf("no table#%s", id)
	}
	tbody := find(table, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "tbody" })
	var rows [][]string
	for tr := tbody.FirstChild; tr != nil; tr = tr.NextSibling {
		if tr.Type != html.ElementNode || tr.Data != "tr" {
			continue
		}
		var cells []string
		for td := tr.FirstChild; td != nil; td = td.NextSibling {
			if td.Type == html.ElementNode && td.Data == "td" {
				cells = append(cells, text(td))
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

func find(n *html.Node, pred func(*html.Node) bool) *html.Node {
	if pred(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, pred); f != nil {
			return f
		}
	}
	return nil
}

func walk(n *html.Node, fn func(*html.Node)) {
	fn(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	})
	return strings.TrimSpace(b.String())
}

func TestWriteHTMLStructure(t *testing.T) {
	out := render(t)
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output does not parse as HTML: %v", err)
	}

	// Self-contained and inert: no script elements, no external references.
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		if n.Data == "script" {
			t.Errorf("output contains a <script> element: %v", n.Attr)
		}
		if n.Data == "link" || n.Data == "img" || n.Data == "iframe" {
			t.Errorf("output references an external resource via <%s>", n.Data)
		}
		for _, a := range n.Attr {
			if (a.Key == "src" || a.Key == "href") && a.Val != "" {
				t.Errorf("<%s %s=%q>: report must not reference anything outside itself", n.Data, a.Key, a.Val)
			}
		}
	})
	if strings.Contains(strings.ToLower(out), "<script") {
		t.Error("raw output contains an unescaped <script")
	}
	for _, bad := range []string{"http://", "https://", "url("} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q: external reference", bad)
		}
	}
	style := find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "style" })
	if style == nil || !strings.Contains(text(style), ".badge") {
		t.Error("no inline <style> with the report's CSS")
	}

	// The hostile log line survives as text, escaped, not dropped.
	if !strings.Contains(out, "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt; &amp; more") {
		t.Error("hostile timeline message not rendered as escaped text")
	}

	// Verdicts: the failure first, then natural component order.
	vrows := tableRows(t, doc, "verdicts")
	var got []string
	for _, r := range vrows {
		got = append(got, r[0]+" "+r[2])
	}
	want := []string{"gpu/10 FAIL", "gpu/1 PASS", "gpu/2 PASS", "nic/0 SKIP", "nvme/0 PASS"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("verdict rows = %v, want %v", got, want)
	}
	if r := vrows[0]; r[1] != "ecc" || r[3] != "12 uncorrectable" || r[4] != "0" || r[5] != "retire the GPU & open an RMA" {
		t.Errorf("failing verdict row = %q", r)
	}

	// Summary counts.
	sum := find(doc, func(n *html.Node) bool { return attr(n, "id") == "summary" })
	if sum == nil {
		t.Fatal("no #summary")
	}
	st := strings.Join(strings.Fields(text(sum)), " ")
	if st != "5checks 1FAIL 3PASS 1SKIP" {
		t.Errorf("summary text = %q", st)
	}

	// Header.
	for _, w := range []string{"rack3-u17", "run-42", "DIAGNOSTIC", "FAILED", "2025-10-09 08:53:20 UTC",
		"2025-10-09 09:05:54 UTC", "12m34s", "2025-10-09 09:06:40 UTC", "1 component failed: gpu/10 ecc", "<dt>Boot path</dt><dd>uefi-https</dd>"} {
		if !strings.Contains(out, w) {
			t.Errorf("header lacks %q", w)
		}
	}
	status := find(doc, func(n *html.Node) bool { return strings.Contains(attr(n, "class"), "status") && n.Data == "dd" })
	if status == nil || !strings.Contains(attr(status, "class"), "bad") {
		t.Errorf("run status not coloured as failed")
	}

	// Phases keep pipeline order, with attempts and durations.
	prows := tableRows(t, doc, "phases")
	if len(prows) != 3 || strings.Join(prows[1], "|") != "gpu_diag|FAILED|2|11m36s|gpu/10: 12 uncorrectable ECC errors" {
		t.Errorf("phase rows = %q", prows)
	}

	// Timeline: metric dropped, offsets relative to the run start.
	trows := tableRows(t, doc, "timeline")
	if len(trows) != 5 {
		t.Fatalf("timeline has %d rows, want 5 (metric dropped): %q", len(trows), trows)
	}
	for _, r := range trows {
		if strings.Contains(r[5], "gpu_temp_c") {
			t.Error("metric entry rendered in the timeline")
		}
	}
	if strings.Join(trows[4][:5], "|") != "+12:34.0|coord||run_end|FAILED" {
		t.Errorf("run_end row = %q", trows[4])
	}
	if trows[1][0] != "+00:04.0" || trows[1][1] != "node" {
		t.Errorf("phase_start row = %q", trows[1])
	}
	if !strings.Contains(out, "1 metric samples omitted") {
		t.Error("omitted metric count not shown")
	}
}

func TestWriteHTMLEmpty(t *testing.T) {
	var b bytes.Buffer
	err := writeHTML(&b, &curev1.RunReport{RunId: "r", NodeId: "n", Status: "running", StartedUnixMs: t0}, nil, time.UnixMilli(t0))
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{"No verdicts were recorded", "No phases were recorded", "No timeline entries", "RUNNING"} {
		if !strings.Contains(out, w) {
			t.Errorf("empty report lacks %q", w)
		}
	}
	if err := WriteHTML(&b, nil, nil); err == nil {
		t.Error("nil report accepted")
	}
}

func TestNaturalCompare(t *testing.T) {
	in := []string{"gpu/10", "nvme/0", "gpu/2", "bmc", "gpu/1", "disk/nvme10n1", "disk/nvme2n1", "nic/1", "gpu/02", "gpu", "bios"}
	sort.Slice(in, func(i, j int) bool { return natural.Compare(in[i], in[j]) < 0 })
	want := "bios bmc disk/nvme2n1 disk/nvme10n1 gpu gpu/1 gpu/02 gpu/2 gpu/10 nic/1 nvme/0"
	if got := strings.Join(in, " "); got != want {
		t.Errorf("natural order:\n got %s\nwant %s", got, want)
	}
}

func TestOffsetAndSpan(t *testing.T) {
	for ms, want := range map[int64]string{0: "+00:00.0", 62_500: "+01:02.5", 3_723_400: "+1:02:03.4", -1500: "-00:01.5"} {
		if got := offset(ms); got != want {
			t.Errorf("offset(%d) = %q, want %q", ms, got, want)
		}
	}
	for ms, want := range map[int64]string{850: "850ms", 2_540: "2.5s", 90_000: "1m30s", 4*3_600_000 + 125_000: "4h02m"} {
		if got := span(ms); got != want {
			t.Errorf("span(%d) = %q, want %q", ms, got, want)
		}
	}
}
