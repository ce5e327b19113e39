package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Live streams. Every open /events stream reads the same fleet snapshot,
// taken once per Interval by one goroutine while any stream is open: the
// store is read once per tick however many streams there are. A stream's
// own work per tick is the rows of the nodes its page shows (at most
// maxWatch lookups) and its filter's counts, which are computed once per
// distinct filter per snapshot and shared too. Streams are capped per
// operator and in total, so what one viewer (or a stolen certificate) can
// make the coordinator do is bounded.

// Observer hears how the live streams fare (the coordinator's metrics).
type Observer interface {
	DashboardStreams(open int)            // streams open now
	DashboardStreamRefused(reason string) // a stream refused: StreamCapOperator or StreamCapTotal
	DashboardSnapshot()                   // a fleet snapshot taken for the streams
	DashboardStreamUpdate()               // a stream took a snapshot in (one per stream per snapshot)
}

// Why a stream is refused.
const (
	StreamCapOperator = "operator-streams"
	StreamCapTotal    = "total-streams"
)

// maxWatch bounds the nodes one stream follows row by row (a page shows 100).
const maxWatch = 500

type noObserver struct{}

func (noObserver) DashboardStreams(int)          {}
func (noObserver) DashboardStreamRefused(string) {}
func (noObserver) DashboardSnapshot()            {}
func (noObserver) DashboardStreamUpdate()        {}

// streamCaps counts the open streams, in total and per operator.
type streamCaps struct {
	max, perViewer int
	obs            Observer

	mu       sync.Mutex
	total    int
	byViewer map[string]int
}

// streamRefused is a refused stream: the reason (a constant) and what the
// operator reads.
type streamRefused struct{ reason, msg string }

func (e *streamRefused) Error() string { return e.msg }

func (c *streamCaps) acquire(viewer string) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byViewer[viewer] >= c.perViewer {
		return nil, &streamRefused{StreamCapOperator, fmt.Sprintf("live updates refused: %s already has %d live dashboard streams open, the most one operator may; "+
			"close another dashboard tab (the page itself still loads)", viewer, c.perViewer)}
	}
	if c.total >= c.max {
		return nil, &streamRefused{StreamCapTotal, fmt.Sprintf("live updates refused: %d live dashboard streams are open on this coordinator, the most it serves; "+
			"try again later (the page itself still loads)", c.max)}
	}
	c.total++
	c.byViewer[viewer]++
	c.obs.DashboardStreams(c.total)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.total--
			if c.byViewer[viewer]--; c.byViewer[viewer] <= 0 {
				delete(c.byViewer, viewer)
			}
			c.obs.DashboardStreams(c.total)
		})
	}, nil
}

// feed takes the fleet snapshots the streams share.
type feed struct {
	st       *store.Store
	log      *slog.Logger
	obs      Observer
	interval time.Duration
	ticks    <-chan time.Time // tests: ticks given by hand instead of a ticker

	mu      sync.Mutex
	subs    int
	running bool
	cur     *snapshot
	changed chan struct{} // closed when cur is replaced

	taken atomic.Int64 // snapshots taken
}

func newFeed(st *store.Store, log *slog.Logger, obs Observer, interval time.Duration, ticks <-chan time.Time) *feed {
	return &feed{st: st, log: log, obs: obs, interval: interval, ticks: ticks, changed: make(chan struct{})}
}

// join adds a stream; the snapshots are taken while any stream is in.
func (f *feed) join() (leave func()) {
	f.mu.Lock()
	f.subs++
	if !f.running {
		f.running = true
		go f.loop()
	}
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.subs--
			f.mu.Unlock()
		})
	}
}

// current is the latest snapshot (nil before the first) and a channel
// closed when a newer one is published.
func (f *feed) current() (*snapshot, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur, f.changed
}

func (f *feed) publish(s *snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = s
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *feed) loop() {
	tick := f.ticks
	if tick == nil {
		t := time.NewTicker(f.interval)
		defer t.Stop()
		tick = t.C
	}
	failing := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(10*time.Second, 5*f.interval))
		s := takeSnapshot(ctx, f.st)
		cancel()
		f.taken.Add(1)
		f.obs.DashboardSnapshot()
		switch {
		case s.err != nil && !failing:
			f.log.Error("dashboard live updates: fleet snapshot", "err", s.err)
			failing = true
		case s.err == nil && failing:
			f.log.Info("dashboard live updates: fleet snapshot works again")
			failing = false
		}
		f.publish(s)
		<-tick
		f.mu.Lock()
		if f.subs == 0 {
			// The last stream left: stop reading the store. A stream that
			// joins later starts a new loop and never sees this snapshot.
			f.running, f.cur = false, nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// snapshot is the fleet at one tick: every node with its latest run.
type snapshot struct {
	err   error
	time  int64
	nodes []store.NodeSummary // ordered by id
	rows  []Row               // rows[i] is nodes[i]'s row, message clipped
	index map[string]int      // node id → position

	mu     sync.Mutex
	counts map[Filter]*fleetCounts // per filter of the streams, computed once
}

// fleetCounts are a filter's counts in a snapshot.
type fleetCounts struct {
	nodes             int
	byStatus, byPhase []Count
	key               string // the counts as JSON: what a stream compares with what it last sent
}

func takeSnapshot(ctx context.Context, st *store.Store) *snapshot {
	s := &snapshot{time: time.Now().UnixMilli(), counts: map[Filter]*fleetCounts{}}
	nodes, err := st.NodeSummaries(ctx)
	if err != nil {
		s.err = err
		return s
	}
	latest, err := st.LatestRunSummaries(ctx)
	if err != nil {
		s.err = err
		return s
	}
	pools, err := st.NodePools(ctx)
	if err != nil {
		s.err = err
		return s
	}
	s.nodes, s.rows, s.index = nodes, make([]Row, len(nodes)), make(map[string]int, len(nodes))
	for i, n := range nodes {
		var latestRun *store.RunSummary
		if r, ok := latest[n.ID]; ok {
			latestRun = &r
		}
		s.rows[i] = newRow(n, latestRun, poolOf(pools, n.ID))
		s.index[n.ID] = i
	}
	return s
}

// countsFor is the filter's counts, computed by the first stream that asks.
func (s *snapshot) countsFor(f Filter) *fleetCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.counts[f]; ok {
		return c
	}
	byStatus, byPhase := map[string]int{}, map[string]int{}
	n := 0
	for i, node := range s.nodes {
		if !f.matches(node) {
			continue
		}
		n++
		row := s.rows[i]
		byStatus[row.Status]++
		if runstate.Active(row.Run) {
			byPhase[nonEmpty(row.Phase, "start")]++
		}
	}
	c := &fleetCounts{nodes: n, byStatus: counts(byStatus), byPhase: counts(byPhase)}
	key, _ := json.Marshal([]any{c.nodes, c.byStatus, c.byPhase})
	c.key = string(key)
	s.counts[f] = c
	return c
}

// streamState is what one stream last sent.
type streamState struct {
	filter     Filter
	watch      []string // sorted, at most maxWatch
	last       map[string]Row
	lastCounts string
	first      bool
}

func newStreamState(f Filter, nodes string) *streamState {
	seen := map[string]bool{}
	var watch []string
	for _, n := range strings.Split(nodes, ",") {
		if n != "" && !seen[n] && len(watch) < maxWatch {
			seen[n] = true
			watch = append(watch, n)
		}
	}
	slices.Sort(watch)
	return &streamState{filter: f, watch: watch, last: map[string]Row{}, first: true}
}

// next is the stream's message for snap: the counts and the watched rows
// that changed; nil when nothing did.
func (st *streamState) next(snap *snapshot) *Delta {
	c := snap.countsFor(st.filter)
	var d Delta
	for _, id := range st.watch {
		i, ok := snap.index[id]
		if !ok || !st.filter.matches(snap.nodes[i]) {
			continue
		}
		row := snap.rows[i]
		if prev, ok := st.last[id]; st.first || !ok || prev != row {
			d.Changed = append(d.Changed, row)
			st.last[id] = row
		}
	}
	if !st.first && len(d.Changed) == 0 && c.key == st.lastCounts {
		return nil
	}
	st.first, st.lastCounts = false, c.key
	d.Nodes, d.ByStatus, d.ByPhase, d.Time = c.nodes, c.byStatus, c.byPhase, snap.time
	return &d
}

// events streams deltas for the nodes listed in ?nodes= (those on the
// page, at most maxWatch) and the filter's counts.
func (d *dash) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	v := viewerOf(r)
	release, err := d.caps.acquire(v.Name)
	if err != nil {
		reason := err.(*streamRefused).reason
		d.cfg.Observer.DashboardStreamRefused(reason)
		d.refusals.Note(reason, v.Name)
		w.Header().Set("Retry-After", "30")
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer release()
	st := newStreamState(filterOf(r), r.URL.Query().Get("nodes"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	leave := d.feed.join()
	defer leave()
	var last *snapshot
	for {
		snap, changed := d.feed.current()
		if snap != nil && snap != last {
			last = snap
			d.cfg.Observer.DashboardStreamUpdate()
			if snap.err == nil {
				if delta := st.next(snap); delta != nil {
					b, _ := json.Marshal(delta)
					if _, err := fmt.Fprintf(w, "event: delta\ndata: %s\n\n", b); err != nil {
						return
					}
					fl.Flush()
				}
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

func newStreamRefusals(log *slog.Logger) *peerlimit.Refusals {
	return peerlimit.NewRefusals(log, "web-streams", slog.LevelWarn, 0)
}
