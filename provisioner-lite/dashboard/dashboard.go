// Package dashboard is the coordinator's read-only web dashboard: a fleet
// view (nodes × current phase, counts per status, failures first, filter by
// SKU or label, paged), a node page (a Gantt of the run's phases, its time
// buckets, verdicts worst first, the RMA report) and live updates by
// server-sent events. Go templates and embedded assets: no build step.
//
// Scale: every page is aggregated on the server and paged (PageSize rows);
// the event stream sends the counts (a few dozen numbers) and only the rows
// of the nodes the page shows that changed, never the fleet. All streams
// share one fleet snapshot per tick, and they are capped per operator and
// in total (stream.go).
//
// Security (docs/SECURITY.md): every request is authenticated by Auth (the
// operator's verified client certificate, as for curectl); the dashboard
// offers no action, so it takes GET only (no CSRF surface); pages are
// served with a strict CSP (no inline script), no-store and no framing; no
// secret is ever in a URL.
package dashboard

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
	"google.golang.org/protobuf/encoding/protojson"
)

//go:embed assets/*
var assets embed.FS

//go:embed templates/*.html
var templates embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"dur":   func(d time.Duration) string { return roundDur(d) },
	"ms":    func(t time.Time) int64 { return t.UnixMilli() },
	"stamp": func(t time.Time) string { return stamp(t) },
	"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) },
	"q":     url.QueryEscape,
	// status shows a run, phase or verdict status by its name.
	"status": statusName,
}).ParseFS(templates, "templates/*.html"))

// Config configures the dashboard.
type Config struct {
	Store *store.Store
	// Auth authenticates a request (CertViewer in production).
	Auth func(*http.Request) (Viewer, error)
	Log  *slog.Logger
	// PageSize is the fleet view's rows per page (default 100).
	PageSize int
	// Interval is how often the live streams look for changes (default 1s).
	Interval time.Duration
	// MaxStreams caps the live streams open at once (default 64), and
	// MaxStreamsPerViewer those of one operator (default 8): past either
	// a stream is refused with 429.
	MaxStreams, MaxStreamsPerViewer int
	// Observer hears of streams and snapshots (optional).
	Observer Observer
	// Admission, if set, is a node's standing with its SKU's admission
	// policy (nil result: the SKU has none), shown on the node page.
	Admission func(ctx context.Context, nodeID string) (*admission.Result, error)

	ticks <-chan time.Time // tests: snapshot ticks given by hand
}

// Handler serves the dashboard.
func Handler(cfg Config) http.Handler {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.MaxStreamsPerViewer <= 0 {
		cfg.MaxStreamsPerViewer = 8
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	d := &dash{cfg: cfg,
		caps:     &streamCaps{max: cfg.MaxStreams, perViewer: cfg.MaxStreamsPerViewer, obs: cfg.Observer, byViewer: map[string]int{}},
		feed:     newFeed(cfg.Store, cfg.Log, cfg.Observer, cfg.Interval, cfg.ticks),
		refusals: newStreamRefusals(cfg.Log),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.fleet)
	mux.HandleFunc("GET /nodes/{id}", d.node)
	mux.HandleFunc("GET /nodes/{id}/report", d.report)
	mux.HandleFunc("GET /events", d.events)
	mux.Handle("GET /assets/", http.FileServerFS(assets))
	return d.guard(mux)
}

type dash struct {
	cfg      Config
	caps     *streamCaps
	feed     *feed
	refusals *peerlimit.Refusals
}

// guard authenticates, refuses anything but GET/HEAD and sets the headers
// every answer carries.
func (d *dash) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		v, err := d.cfg.Auth(r)
		if err != nil {
			d.cfg.Log.Warn("dashboard: refused", "peer", r.RemoteAddr, "path", r.URL.Path, "err", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewerKey{}, v)))
	})
}

type viewerKey struct{}

func viewerOf(r *http.Request) Viewer { v, _ := r.Context().Value(viewerKey{}).(Viewer); return v }

// Row is a node in the fleet view. Status is its latest run's status as
// the page and the stream show it (its name, "none" for a node never run).
// Pool is its day-2 pool state (provisioner-lite/pool), "-" when not in the
// pool.
type Row struct {
	Node, SKU, Status, Phase, RunID, Message string
	Pool                                     string
	Ended                                    time.Time
	Run                                      curev1.RunStatus `json:"-"`
}

// newRow is a node's row, with its latest run if it has one.
func newRow(n store.NodeSummary, r *store.RunSummary, pool string) Row {
	row := Row{Node: n.ID, SKU: n.SKU, Status: render.RunLabel(curev1.RunStatus_RUN_STATUS_UNSPECIFIED), Pool: pool}
	if r != nil {
		row.Run, row.Status, row.Phase, row.RunID, row.Message, row.Ended = r.Status, render.RunLabel(r.Status), string(r.Phase), r.ID, clip(r.Message, 200), r.EndedAt
	}
	return row
}

// statusName is a status's name, for the templates.
func statusName(s any) string {
	switch s := s.(type) {
	case curev1.RunStatus:
		return render.RunLabel(s)
	case curev1.PhaseStatus:
		return runstate.PhaseName(s)
	case curev1.VerdictStatus:
		return runstate.VerdictName(s)
	}
	return fmt.Sprint(s)
}

// poolOf is a node's pool state as the fleet view shows it.
func poolOf(pools map[string]store.NodePool, node string) string {
	if p, ok := pools[node]; ok && p.State != "" {
		return p.State
	}
	return "-"
}

// Fleet is the aggregated fleet view.
type Fleet struct {
	Nodes    int
	ByStatus []Count
	ByPhase  []Count
	Rows     []Row // this page
	Page     int
	Pages    int
	Prev     int // 0: none
	Next     int // 0: none
	Filter   Filter
}

// Count is one status or phase and its node count.
type Count struct {
	Name string
	N    int
}

// Filter selects nodes by SKU and one label.
type Filter struct{ SKU, Label string }

func (f Filter) matches(n store.NodeSummary) bool {
	if f.SKU != "" && n.SKU != f.SKU {
		return false
	}
	if f.Label != "" {
		k, v, _ := strings.Cut(f.Label, "=")
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}

func (f Filter) Query() string {
	q := url.Values{}
	if f.SKU != "" {
		q.Set("sku", f.SKU)
	}
	if f.Label != "" {
		q.Set("label", f.Label)
	}
	return q.Encode()
}

// statusRank orders the fleet view: what needs a human first.
func statusRank(s curev1.RunStatus) int {
	switch s {
	case curev1.RunStatus_RUN_FAILED:
		return 0
	case curev1.RunStatus_RUN_ATTENTION:
		return 1
	case curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_PENDING:
		return 2
	case curev1.RunStatus_RUN_CANCELED:
		return 3
	case curev1.RunStatus_RUN_SUCCEEDED:
		return 4
	case curev1.RunStatus_RUN_STATUS_UNSPECIFIED:
		return 5 // never run
	default:
		return 5 // a status newer than this dashboard
	}
}

// BuildFleet aggregates the fleet from two queries (nodes, latest runs).
func BuildFleet(ctx context.Context, st *store.Store, f Filter, page, pageSize int) (Fleet, []Row, error) {
	nodes, err := st.NodeSummaries(ctx)
	if err != nil {
		return Fleet{}, nil, err
	}
	latest, err := st.LatestRunSummaries(ctx)
	if err != nil {
		return Fleet{}, nil, err
	}
	pools, err := st.NodePools(ctx)
	if err != nil {
		return Fleet{}, nil, err
	}
	byStatus, byPhase := map[string]int{}, map[string]int{}
	var rows []Row
	for _, n := range nodes {
		if !f.matches(n) {
			continue
		}
		var latestRun *store.RunSummary
		if r, ok := latest[n.ID]; ok {
			latestRun = &r
			if runstate.Active(r.Status) {
				byPhase[nonEmpty(r.Phase, "start")]++
			}
		}
		row := newRow(n, latestRun, poolOf(pools, n.ID))
		if latestRun != nil {
			row.Message = latestRun.Message
		}
		byStatus[row.Status]++
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if a, b := statusRank(rows[i].Run), statusRank(rows[j].Run); a != b {
			return a < b
		}
		return rows[i].Node < rows[j].Node
	})
	fl := Fleet{Nodes: len(rows), ByStatus: counts(byStatus), ByPhase: counts(byPhase), Filter: f}
	fl.Pages = max(1, (len(rows)+pageSize-1)/pageSize)
	fl.Page = min(max(page, 1), fl.Pages)
	if fl.Page > 1 {
		fl.Prev = fl.Page - 1
	}
	if fl.Page < fl.Pages {
		fl.Next = fl.Page + 1
	}
	lo := (fl.Page - 1) * pageSize
	fl.Rows = rows[min(lo, len(rows)):min(lo+pageSize, len(rows))]
	return fl, rows, nil
}

// nameRank ranks a count by the run status it names (a phase, or "none",
// ranks last).
func nameRank(name string) int {
	s, _ := runstate.ParseRun(name)
	return statusRank(s)
}

func counts(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, v := range m {
		out = append(out, Count{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := nameRank(out[i].Name), nameRank(out[j].Name); a != b {
			return a < b
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func nonEmpty[S ~string](s S, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}

func filterOf(r *http.Request) Filter {
	return Filter{SKU: r.URL.Query().Get("sku"), Label: r.URL.Query().Get("label")}
}

func (d *dash) fleet(w http.ResponseWriter, r *http.Request) {
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	fl, _, err := BuildFleet(r.Context(), d.cfg.Store, filterOf(r), page, d.cfg.PageSize)
	if err != nil {
		d.fail(w, err)
		return
	}
	d.render(w, "fleet.html", map[string]any{"F": fl, "Viewer": viewerOf(r), "Now": time.Now()})
}

// NodeView is the node as the page shows it.
type NodeView struct {
	ID, SKU, Hostname, Serial string
	MACs                      []string
	Labels                    map[string]string
	// Pool is the node's pool state with why and since when (zero State:
	// not in the pool).
	Pool store.NodePool
}

// Bar is a phase in the node page's Gantt chart (positions in % of the run).
type Bar struct {
	Name        string
	Status      curev1.PhaseStatus
	Left, Width float64
	Duration    time.Duration
	Attempts    int
	Start       time.Time
	Message     string
}

func (d *dash) node(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	n, err := d.cfg.Store.GetNode(ctx, id)
	if err != nil {
		http.Error(w, "no node "+id, http.StatusNotFound)
		return
	}
	// Only what an operator needs to see: never the BMC credentials.
	view := NodeView{ID: n.ID, SKU: n.SKU, Hostname: n.Hostname, Serial: n.SystemSerial, MACs: n.MACs, Labels: n.Labels}
	if p, err := d.cfg.Store.NodePool(ctx, id); err == nil {
		view.Pool = p
	}
	data := map[string]any{"Node": view, "Viewer": viewerOf(r)}
	if d.cfg.Admission != nil {
		// The gate fails closed here too: what could not be judged is said.
		if res, err := d.cfg.Admission(ctx, id); err != nil {
			data["AdmissionError"] = err.Error()
		} else if res != nil {
			data["Admission"] = res
		}
	}
	// The latest boot's hardware, as the runner reported it (stored cleaned
	// and bounded; html/template escapes it again).
	if rec, err := d.cfg.Store.LatestInventory(ctx, id); err == nil {
		if inv, err := inventory.Unmarshal(rec.JSON); err == nil {
			data["Inventory"] = render.InventorySections(inv)
			data["InventoryHeading"] = render.InventoryHeading(&curev1.InventoryRecord{BootId: rec.BootID, RunId: rec.RunID,
				TimeUnixMs: rec.Time.UnixMilli(), Peer: rec.Peer, Truncated: rec.Truncated}, "")
		}
	}
	run, err := d.runOf(ctx, id, r.URL.Query().Get("run"))
	if err == nil {
		phases, err := d.cfg.Store.Phases(ctx, run.ID)
		if err != nil {
			d.fail(w, err)
			return
		}
		// The run's events a page at a time, keeping what the page shows:
		// a soak's timeline (up to the run's event cap) is never in memory.
		var tl timebuckets.Collector
		warn := warningTail{max: maxWarnings}
		if err := d.cfg.Store.ScanEvents(ctx, run.ID, 0, func(e store.Event) error {
			tl.Add(e)
			warn.add(e)
			return nil
		}); err != nil {
			d.fail(w, err)
			return
		}
		events := tl.Events()
		vs, err := d.cfg.Store.Verdicts(ctx, run.ID)
		if err != nil {
			d.fail(w, err)
			return
		}
		now := time.Now()
		data["Run"] = run
		data["Bars"] = gantt(run, phases, now)
		data["Reboots"] = rebootMarks(run, timebuckets.RebootTimes(phases, events), now)
		data["Buckets"] = timebuckets.Compute(run, phases, events, now)
		data["Verdicts"] = worstFirst(vs)
		data["Suite"] = suiteView(ctx, d.cfg.Store, run, now)
		d.fleetBands(ctx, run.ID, data)
		data["Warnings"] = warn.events
		runs, _ := d.cfg.Store.RunsOfNode(ctx, id)
		if len(runs) > 20 {
			runs = runs[:20]
		}
		data["Runs"] = runs
	}
	d.render(w, "node.html", data)
}

// suiteView is the run's suite progress from its runner's latest heartbeat
// (nil when none).
func suiteView(ctx context.Context, st *store.Store, run store.Run, now time.Time) *render.SuiteView {
	rec, err := st.RunProgress(ctx, run.ID)
	if err != nil {
		return nil
	}
	var p curev1.Progress
	if protojson.Unmarshal(rec.JSON, &p) != nil {
		return nil
	}
	var deadline int64
	if d := run.Pipeline.Phase(run.Phase).Deadline; !d.IsZero() && run.Phase == rec.Phase {
		deadline = d.UnixMilli()
	}
	return render.SuiteProgress(&p, rec.Received.UnixMilli(), deadline, runstate.Active(run.Status), now)
}

// maxWarnings bounds the warnings a node page lists (the newest).
const maxWarnings = 20

// warningTail keeps the newest max of the coordinator's warnings on a
// run's timeline, fed one event at a time (a network boot request from a MAC not in the inventory while the node waits for
// CURE, an artifact needed only on drift): what an operator may have to
// fix while the run goes on.
type warningTail struct {
	max    int
	events []store.Event
}

func (w *warningTail) add(e store.Event) {
	if e.Source != runstate.SourceCoordinator || e.Kind != runstate.EventLog || e.Status != "WARN" {
		return
	}
	if len(w.events) == w.max {
		w.events = append(w.events[:0], w.events[1:]...)
	}
	w.events = append(w.events, e)
}

func (d *dash) runOf(ctx context.Context, node, runID string) (store.Run, error) {
	if runID == "" {
		return d.cfg.Store.LatestRun(ctx, node)
	}
	r, err := d.cfg.Store.GetRun(ctx, runID)
	if err == nil && r.NodeID != node {
		return store.Run{}, store.ErrNotFound
	}
	return r, err
}

// gantt places each phase on the run's time axis.
func gantt(run store.Run, phases []store.Phase, now time.Time) []Bar {
	start, end := run.StartedAt, run.EndedAt
	if end.IsZero() {
		end = now
	}
	total := end.Sub(start)
	if total <= 0 {
		total = time.Millisecond
	}
	var bars []Bar
	for _, p := range phases {
		if p.StartedAt.IsZero() {
			continue
		}
		pe := p.EndedAt
		if pe.IsZero() {
			pe = end
		}
		l := 100 * float64(p.StartedAt.Sub(start)) / float64(total)
		wd := 100 * float64(pe.Sub(p.StartedAt)) / float64(total)
		l = min(max(l, 0), 100)
		wd = min(max(wd, 0.3), 100-l) // a visible sliver for instant phases
		bars = append(bars, Bar{Name: string(p.Name), Status: p.Status, Left: l, Width: wd, Duration: pe.Sub(p.StartedAt), Attempts: p.Attempts, Start: p.StartedAt, Message: p.Message})
	}
	return bars
}

// Mark is a reboot on the Gantt's time axis.
type Mark struct {
	Left float64
	At   time.Time
}

func rebootMarks(run store.Run, ts []time.Time, now time.Time) []Mark {
	end := run.EndedAt
	if end.IsZero() {
		end = now
	}
	total := end.Sub(run.StartedAt)
	if total <= 0 {
		return nil
	}
	var out []Mark
	for _, t := range ts {
		out = append(out, Mark{Left: min(max(100*float64(t.Sub(run.StartedAt))/float64(total), 0), 100), At: t})
	}
	return out
}

func verdictRank(s curev1.VerdictStatus) int {
	switch s {
	case curev1.VerdictStatus_FAIL, curev1.VerdictStatus_ERROR:
		return 0
	case curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_MARGINAL:
		return 1
	case curev1.VerdictStatus_SKIP:
		return 2
	case curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		return 3
	default:
		return 3 // a status newer than this dashboard
	}
}

func worstFirst(vs []store.Verdict) []store.Verdict {
	vs = slices.Clone(vs)
	sort.SliceStable(vs, func(i, j int) bool { return verdictRank(vs[i].Status) < verdictRank(vs[j].Status) })
	return vs
}

// report is the self-contained RMA report curectl writes (curectl report --html).
func (d *dash) report(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	run, err := d.runOf(ctx, r.PathValue("id"), r.URL.Query().Get("run"))
	if err != nil {
		http.Error(w, "no run", http.StatusNotFound)
		return
	}
	rep, err := server.BuildReport(ctx, d.cfg.Store, run)
	if err != nil {
		d.fail(w, err)
		return
	}
	evs, err := d.cfg.Store.Events(ctx, run.ID, 0, 0)
	if err != nil {
		d.fail(w, err)
		return
	}
	tl := make([]*curev1.TimelineEntry, 0, len(evs))
	for _, e := range evs {
		tl = append(tl, server.TimelineEntry(e))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The report is self-contained with inline styles: relax the CSP for it.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'")
	if err := render.WriteHTML(w, rep, tl); err != nil {
		d.cfg.Log.Error("dashboard report", "run", run.ID, "err", err)
	}
}

// Delta is one event-stream message: the counts, and the rows of the
// watched nodes that changed since the last message.
type Delta struct {
	Nodes    int     `json:"nodes"`
	ByStatus []Count `json:"by_status"`
	ByPhase  []Count `json:"by_phase"`
	Changed  []Row   `json:"changed"`
	Time     int64   `json:"time"`
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (d *dash) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := tmpl.ExecuteTemplate(w, name, data); err != nil {
		d.cfg.Log.Error("dashboard render", "page", name, "err", err)
	}
}

func (d *dash) fail(w http.ResponseWriter, err error) {
	d.cfg.Log.Error("dashboard", "err", err)
	http.Error(w, "store unavailable", http.StatusServiceUnavailable)
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
