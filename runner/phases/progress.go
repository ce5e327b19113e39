package phases

import (
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/suite"
)

// suiteProgress is a running suite as its heartbeats (Progress) tell it:
// each check's state and an estimate of what is left. Safe for concurrent
// use: a stage's checks end on their own goroutines.
type suiteProgress struct {
	mu      sync.Mutex
	now     func() time.Time
	suite   string
	start   time.Time
	planned time.Duration
	bound   time.Duration // the suite's duration bound (0: none)
	resumed uint32
	stage   string
	checks  []*checkProgress // suite order
	byName  map[string]*checkProgress
}

type checkProgress struct {
	name, stage string
	planned     time.Duration
	state       checks.CheckState
	started     time.Time
	elapsed     time.Duration // of a check that ended
	worst       curev1.VerdictStatus
}

// newSuiteProgress starts tracking s; done are the checks that ended
// before a node reset (kept done, with their verdict and length).
func newSuiteProgress(s *manifests.ValidationSuite, done []*curev1.CheckProgress, resumed uint32, now func() time.Time) *suiteProgress {
	p := &suiteProgress{now: now, suite: s.Metadata.Name, start: now(), planned: s.Spec.Planned(),
		bound: time.Duration(s.Spec.Duration), resumed: resumed, byName: map[string]*checkProgress{}}
	for _, c := range s.Spec.Checks {
		cp := &checkProgress{name: c.Name, stage: c.Stage, planned: suite.CheckDuration(&s.Spec, c), state: checks.CheckPending}
		p.checks = append(p.checks, cp)
		p.byName[c.Name] = cp
	}
	for _, d := range done {
		if cp := p.byName[d.GetCheck()]; cp != nil {
			cp.state, cp.worst, cp.elapsed = checks.CheckDone, d.GetWorst(), time.Duration(d.GetElapsedMs())*time.Millisecond
		}
	}
	return p
}

// doneBefore is the checks.Options.Done of a resumed suite.
func doneBefore(done []*curev1.CheckProgress) map[string]checks.Status {
	if len(done) == 0 {
		return nil
	}
	m := map[string]checks.Status{}
	for _, d := range done {
		st := checks.Status(d.GetWorst().String())
		switch st {
		case checks.Pass, checks.Fail, checks.Skip, checks.Error:
		default:
			st = checks.Error // a verdict the checks cannot give: not a pass
		}
		m[d.GetCheck()] = st
	}
	return m
}

func (p *suiteProgress) check(name string, st checks.CheckState, worst checks.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp := p.byName[name]
	if cp == nil {
		return
	}
	cp.state = st
	switch st {
	case checks.CheckRunning:
		cp.started = p.now()
	case checks.CheckDone:
		cp.worst = protoStatus(worst)
		if !cp.started.IsZero() {
			cp.elapsed = p.now().Sub(cp.started)
		}
	case checks.CheckPending:
	}
}

func (p *suiteProgress) stageEvent(e checks.StageEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.End {
		p.stage = ""
	} else {
		p.stage = e.Stage
	}
}

// beat sends the current state; the lock covers the send too, so
// heartbeats leave in the order their states were taken.
func (p *suiteProgress) beat(emit agent.Emitter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	emit.Progress(p.snapshotLocked())
}

func (p *suiteProgress) snapshot() *curev1.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshotLocked()
}

func (p *suiteProgress) snapshotLocked() *curev1.Progress {
	now := p.now()
	elapsed := now.Sub(p.start)
	out := &curev1.Progress{Suite: p.suite, Stage: p.stage, ElapsedMs: elapsed.Milliseconds(), PlannedMs: p.planned.Milliseconds(), Resumed: p.resumed}
	for _, cp := range p.checks {
		c := &curev1.CheckProgress{Check: cp.name, Stage: cp.stage, State: string(cp.state), PlannedMs: cp.planned.Milliseconds()}
		switch cp.state {
		case checks.CheckRunning:
			c.ElapsedMs = now.Sub(cp.started).Milliseconds()
		case checks.CheckDone:
			c.ElapsedMs, c.Worst = cp.elapsed.Milliseconds(), cp.worst
		case checks.CheckPending:
		}
		out.Checks = append(out.Checks, c)
	}
	left := p.remainingLocked(now)
	if p.bound > 0 {
		left = min(left, max(p.bound-elapsed, 0))
	}
	out.RemainingMs = left.Milliseconds()
	return out
}

// remainingLocked sums, over the steps not finished (a lone check, or a
// stage whose checks run at once), the longest time one of its checks
// still has to run.
func (p *suiteProgress) remainingLocked(now time.Time) time.Duration {
	var total time.Duration
	var stepLeft time.Duration
	for i, cp := range p.checks {
		if i > 0 && (cp.stage == "" || cp.stage != p.checks[i-1].stage) {
			total += stepLeft
			stepLeft = 0
		}
		switch cp.state {
		case checks.CheckPending:
			stepLeft = max(stepLeft, cp.planned)
		case checks.CheckRunning:
			stepLeft = max(stepLeft, cp.planned-now.Sub(cp.started))
		case checks.CheckDone:
		}
	}
	return total + stepLeft
}
