package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds of one Samples event. The runner sends at most 128 series and
// 16,384 points an event, a series at most 2,048 (tools/telemetry): a
// batch past these is not one a runner sends.
const (
	maxSamplesSeries       = 256
	maxSamplesPoints       = 32768
	maxSamplesSeriesPoints = 4096
	maxSamplesUnit         = 16
	// samplesClockSlack is how far a sample may lie before the run's
	// start or after now: the node's clock is its own (TLS tolerates an
	// hour of skew). Points further out are dropped and counted.
	samplesClockSlack = time.Hour
	// A run's runner may send a batch every samplesEvery on average, with
	// a burst that covers its queue after an outage (64 batches).
	samplesEvery = 5 * time.Second
	samplesBurst = 100
)

// samplesMetric is what a series metric name may be: the runner's are
// plain words (temp_c, clock_mhz, busy_pct).
var samplesMetric = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

var samplesSources = []string{runstate.SeriesHost, runstate.SeriesGPU}

// samplesState is one session's account of its Samples events, so its
// notes in the timeline come once, not per batch.
type samplesState struct {
	notedRate, notedWindow, notedFull bool
}

// samples stores a runner's telemetry batch in the run's series, never as
// an event row (a soak's telemetry must not eat the run's event caps):
// bounded per event (refused past the bounds), per run (the store's
// caps), and in rate (batches past the run's budget are acknowledged but
// not stored, noted once).
func (s *RunnerService) samples(ctx context.Context, sess *sessions.Session, peerIP string, ev *curev1.Event, runnerPhases map[modes.PhaseName]bool,
	runStart time.Time, st *samplesState, log *slog.Logger) error {
	now := time.Now()
	batch, outside, err := runnerSamples(ev, runnerPhases, runStart.Add(-samplesClockSlack), now.Add(samplesClockSlack))
	if err != nil {
		s.security(ctx, audit.RunnerSession, sess, peerIP, err.Error())
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !s.samplesRate.Allow(sess.RunID) {
		if !st.notedRate {
			st.notedRate = true
			s.note(ctx, sess, fmt.Sprintf("telemetry batches arrive faster than one every %s on average: the excess is acknowledged but not stored", samplesEvery))
		}
		return nil
	}
	if outside > 0 && !st.notedWindow {
		st.notedWindow = true
		s.note(ctx, sess, fmt.Sprintf("%d telemetry points dated outside the run (before its start or ahead of the coordinator's clock by more than %s) were not stored: is the node's clock right?",
			outside, samplesClockSlack))
	}
	res, err := s.Store.AppendSeriesWithin(ctx, sess.RunID, batch, store.SeriesBudget{Sources: samplesSources, Max: store.MaxRunnerSeriesPerRun})
	if err != nil {
		log.Error("store runner samples", "seq", ev.GetSeq(), "err", err)
		return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
	}
	if res.Refused > 0 && !st.notedFull {
		st.notedFull = true
		s.note(ctx, sess, fmt.Sprintf("the run holds its most telemetry series (%d from the node): %d new series not stored", store.MaxRunnerSeriesPerRun, res.Refused))
	}
	return nil
}

// note is a coordinator note in the session's run timeline.
func (s *RunnerService) note(ctx context.Context, sess *sessions.Session, msg string) {
	s.event(ctx, store.Event{RunID: sess.RunID, NodeID: sess.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(),
		Kind: runstate.EventInfo, Message: msg})
}

// runnerSamples checks a Samples event and turns it into store series:
// a runner phase of the run, bounded series and points, plain metric
// names, a runner's sources, finite values; every string cleaned. Points
// dated outside [from, to] are left out and counted.
func runnerSamples(ev *curev1.Event, runnerPhases map[modes.PhaseName]bool, from, to time.Time) ([]store.Series, int, error) {
	seq := ev.GetSeq()
	if seq == 0 || seq > 1<<62 {
		return nil, 0, fmt.Errorf("event seq %d: want 1..2^62", seq)
	}
	if phase := ev.GetPhase(); !runnerPhases[modes.PhaseName(phase)] {
		return nil, 0, fmt.Errorf("event seq %d: samples of %q, not a runner phase of this run", seq, textsafe.BoundedLine(phase, maxName))
	}
	in := ev.GetSamples().GetSeries()
	if len(in) == 0 || len(in) > maxSamplesSeries {
		return nil, 0, fmt.Errorf("event seq %d: %d series in a Samples event (want 1..%d)", seq, len(in), maxSamplesSeries)
	}
	points := 0
	for _, sr := range in {
		points += len(sr.GetTimeUnixMs())
	}
	if points > maxSamplesPoints {
		return nil, 0, fmt.Errorf("event seq %d: %d points in a Samples event (limit %d)", seq, points, maxSamplesPoints)
	}
	lo, hi := from.UnixMilli(), to.UnixMilli()
	out := make([]store.Series, 0, len(in))
	outside := 0
	for i, sr := range in {
		where := fmt.Sprintf("event seq %d: series %d", seq, i)
		comp := textsafe.BoundedLine(sr.GetComponent(), maxName)
		if comp == "" {
			return nil, 0, fmt.Errorf("%s: no component", where)
		}
		if !samplesMetric.MatchString(sr.GetMetric()) {
			return nil, 0, fmt.Errorf("%s (%s): metric %q is not a plain name", where, comp, textsafe.BoundedLine(sr.GetMetric(), maxName))
		}
		if !slices.Contains(samplesSources, sr.GetSource()) {
			return nil, 0, fmt.Errorf("%s (%s %s): source %q is not one a runner samples (%v)", where, comp, sr.GetMetric(),
				textsafe.BoundedLine(sr.GetSource(), maxName), samplesSources)
		}
		ts, vs := sr.GetTimeUnixMs(), sr.GetValues()
		if len(ts) != len(vs) || len(ts) > maxSamplesSeriesPoints {
			return nil, 0, fmt.Errorf("%s (%s %s): %d times for %d values (at most %d points a series)", where, comp, sr.GetMetric(), len(ts), len(vs), maxSamplesSeriesPoints)
		}
		s := store.Series{Source: sr.GetSource(), Component: comp, Metric: sr.GetMetric(), Unit: textsafe.BoundedLine(sr.GetUnit(), maxSamplesUnit),
			Times: make([]int64, 0, len(ts)), Values: make([]float64, 0, len(vs))}
		for j, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, 0, fmt.Errorf("%s (%s %s): value %d is %v, not a number", where, comp, sr.GetMetric(), j, v)
			}
			if ts[j] < lo || ts[j] > hi {
				outside++
				continue
			}
			s.Times, s.Values = append(s.Times, ts[j]), append(s.Values, v)
		}
		out = append(out, s)
	}
	return out, outside, nil
}
