package agent

import (
	"context"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// PairInbox holds what the coordinator sent for the node-pair checks of
// the running suite (their schedules and judgements), for the check
// waiting on them: they arrive while the assignment runs, and a check may
// ask after they came. The latest of each per check is kept (a coordinator
// that re-sends after a reconnect sends the same).
type PairInbox struct {
	mu       sync.Mutex
	sched    map[string]*curev1.PairSchedule
	verdicts map[string]*curev1.PairVerdicts
	// at is when each schedule arrived, by this node's clock: the
	// schedule's times are placed from it.
	at      map[string]time.Time
	changed chan struct{}
}

// NewPairInbox returns an empty inbox.
func NewPairInbox() *PairInbox {
	return &PairInbox{sched: map[string]*curev1.PairSchedule{}, verdicts: map[string]*curev1.PairVerdicts{}, at: map[string]time.Time{}, changed: make(chan struct{})}
}

// Put keeps a directive's schedule or judgement.
func (p *PairInbox) Put(d Directive) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case d.PairSchedule != nil:
		p.sched[d.PairSchedule.GetCheck()] = d.PairSchedule
		p.at[d.PairSchedule.GetCheck()] = time.Now()
	case d.PairVerdicts != nil:
		p.verdicts[d.PairVerdicts.GetCheck()] = d.PairVerdicts
	default:
		return
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Schedule waits for check's schedule until ctx ends; it returns when
// the schedule arrived too.
func (p *PairInbox) Schedule(ctx context.Context, check string) (*curev1.PairSchedule, time.Time, error) {
	return wait(ctx, p, func() (*curev1.PairSchedule, time.Time) { return p.sched[check], p.at[check] })
}

// Next waits for check's schedule or, when the coordinator judged the
// node without one (no partner), its judgement.
func (p *PairInbox) Next(ctx context.Context, check string) (*curev1.PairSchedule, *curev1.PairVerdicts, time.Time, error) {
	type both struct {
		s *curev1.PairSchedule
		v *curev1.PairVerdicts
	}
	b, at, err := wait(ctx, p, func() (*both, time.Time) {
		s, v := p.sched[check], p.verdicts[check]
		if s == nil && v == nil {
			return nil, time.Time{}
		}
		return &both{s, v}, p.at[check]
	})
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return b.s, b.v, at, nil
}

// Verdicts waits for check's judgement until ctx ends.
func (p *PairInbox) Verdicts(ctx context.Context, check string) (*curev1.PairVerdicts, time.Time, error) {
	return wait(ctx, p, func() (*curev1.PairVerdicts, time.Time) { return p.verdicts[check], time.Time{} })
}

// Forget drops what the inbox holds for check (a check that starts
// again must not act on an earlier try's schedule).
func (p *PairInbox) Forget(check string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sched, check)
	delete(p.verdicts, check)
	delete(p.at, check)
}

func wait[T any](ctx context.Context, p *PairInbox, get func() (*T, time.Time)) (*T, time.Time, error) {
	for {
		p.mu.Lock()
		v, at := get()
		ch := p.changed
		p.mu.Unlock()
		if v != nil {
			return v, at, nil
		}
		select {
		case <-ctx.Done():
			return nil, time.Time{}, context.Cause(ctx)
		case <-ch:
		}
	}
}
