package peerlimit

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Refusals turns refused peers into log lines a person can read during a
// flood: the first refusal of each reason is logged at once (so a lone
// misconfigured node is seen), later ones are counted and summarised at most
// once per interval per reason, naming how many were refused, from how many
// sources, and the busiest few.
type Refusals struct {
	log      *slog.Logger
	level    slog.Level
	listener string
	every    time.Duration
	now      func() time.Time

	mu      sync.Mutex
	reasons map[string]*reasonState
}

type reasonState struct {
	lastLog time.Time
	count   int
	sources map[string]int
	other   int // refusals from sources beyond maxSources
}

const maxSources = 1024 // distinct sources remembered per reason and interval

// NewRefusals logs for listener (its name in every line) at level,
// summarising at most once per every (0: 10 s).
func NewRefusals(log *slog.Logger, listener string, level slog.Level, every time.Duration) *Refusals {
	if log == nil {
		log = slog.Default()
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	return &Refusals{log: log, level: level, listener: listener, every: every, now: time.Now, reasons: map[string]*reasonState{}}
}

// Note records one refusal of source for reason. Reasons are a small fixed
// set chosen by the caller (never peer text); source is an address or a MAC.
func (r *Refusals) Note(reason, source string) {
	if r == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	st := r.reasons[reason]
	if st == nil {
		if len(r.reasons) >= 64 { // reasons are the caller's constants; this only guards a misuse
			r.mu.Unlock()
			return
		}
		st = &reasonState{sources: map[string]int{}}
		r.reasons[reason] = st
	}
	if st.lastLog.IsZero() {
		st.lastLog = now
		r.mu.Unlock()
		r.log.Log(context.Background(), r.level, "refused", "listener", r.listener, "reason", reason, "source", source)
		return
	}
	st.count++
	if _, ok := st.sources[source]; ok || len(st.sources) < maxSources {
		st.sources[source]++
	} else {
		st.other++
	}
	if now.Sub(st.lastLog) < r.every {
		r.mu.Unlock()
		return
	}
	line := st.summary()
	st.lastLog, st.count, st.sources, st.other = now, 0, map[string]int{}, 0
	r.mu.Unlock()
	r.log.Log(context.Background(), r.level, "refused (summary)", "listener", r.listener, "reason", reason,
		"refused", line.count, "sources", line.sources, "top", line.top, "since", r.every.String())
}

// Flush logs what is pending for every reason (at shutdown, or from a
// ticker so a flood that stopped is still reported).
func (r *Refusals) Flush() {
	if r == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	var lines []summaryLine
	var reasons []string
	for reason, st := range r.reasons {
		if st.count == 0 {
			continue
		}
		lines = append(lines, st.summary())
		reasons = append(reasons, reason)
		st.lastLog, st.count, st.sources, st.other = now, 0, map[string]int{}, 0
	}
	r.mu.Unlock()
	for i, l := range lines {
		r.log.Log(context.Background(), r.level, "refused (summary)", "listener", r.listener, "reason", reasons[i],
			"refused", l.count, "sources", l.sources, "top", l.top)
	}
}

type summaryLine struct {
	count, sources int
	top            []string
}

// summary names the three busiest sources ("10.0.0.9×812").
func (st *reasonState) summary() summaryLine {
	type kv struct {
		k string
		v int
	}
	all := make([]kv, 0, len(st.sources))
	for k, v := range st.sources {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var top []string
	for i := 0; i < len(all) && i < 3; i++ {
		top = append(top, all[i].k+"×"+strconv.Itoa(all[i].v))
	}
	n := len(all)
	if st.other > 0 {
		n = -1 // unknown: more sources than remembered
	}
	return summaryLine{count: st.count, sources: n, top: top}
}
