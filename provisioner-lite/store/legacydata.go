package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/modes"
)

// pipelineSchema is the schema version that adds runs.pipeline.
const pipelineSchema = 11

// Coordinators before schema 11 kept a run's pipeline state as free-form
// string keys in runs.data. The upgrade reads them once, with the rules
// those coordinators wrote them by (decimal integers, RFC 3339 times), into
// runs.pipeline; runs.data is left as it was and no longer read.
const (
	legacyRunnerAddr        = "runner_addr"
	legacyBoot              = "boot"
	legacyCUREWindow        = "cure_window"
	legacyHostTokens        = "host_token_sha256" // space-separated digests, newest last
	legacyHostRebootedAt    = "host_rebooted_at"
	legacyHostWaitFrom      = "host_wait_from"
	legacyHostRebootAttempt = "host_reboot_attempt"
	legacyAttemptsPrefix    = "attempts/" // + phase
	legacyStartedPrefix     = "started/"  // + phase
	legacyDeadlinePrefix    = "deadline/" // + phase
	legacyBMCResetAt        = "bmc_reset_at"
	legacyBMCResets         = "bmc_resets"
	legacyBootRequestedAt   = "boot_requested_at"
	legacyAssignCursor      = "assign_cursor" // event id an assignment was sent at
	legacyFreshCURE         = "fresh_cure"
	legacyOOBPrefix         = "oob/" // + firmware name
)

// legacyReader parses one run's old keys; the first malformed value is kept
// as an error naming the run, the key and the value.
type legacyReader struct {
	runID string
	data  map[string]string
	err   error
}

func (l *legacyReader) malformed(key, val, want string) {
	if l.err == nil {
		l.err = fmt.Errorf("run %s: data %s = %q is not %s", l.runID, key, val, want)
	}
}

func (l *legacyReader) int(key string) int64 {
	v := l.data[key]
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		l.malformed(key, v, "a decimal integer")
	}
	return n
}

func (l *legacyReader) time(key string) time.Time {
	v := l.data[key]
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		l.malformed(key, v, "an RFC 3339 time")
	}
	return t.UTC()
}

// pipelineFromData is the typed state of a run's old keys. Keys no
// coordinator parsed are dropped.
func pipelineFromData(runID string, data map[string]string) PipelineState {
	l := &legacyReader{runID: runID, data: data}
	p := PipelineState{
		RunnerAddr: data[legacyRunnerAddr], CUREWindow: data[legacyCUREWindow], FreshCURE: data[legacyFreshCURE],
		Boot: BootTarget(data[legacyBoot]), HostTokens: strings.Fields(data[legacyHostTokens]),
		BootRequestedAt: l.time(legacyBootRequestedAt),
		Host: HostWait{RebootAttempt: int(l.int(legacyHostRebootAttempt)), RebootedAt: l.time(legacyHostRebootedAt),
			WaitFrom: l.int(legacyHostWaitFrom)},
		BMC: BMCWork{ResetAt: l.time(legacyBMCResetAt), Resets: int(l.int(legacyBMCResets))},
	}
	switch p.Boot {
	case BootUnset, BootCURE, BootDisk:
	default:
		l.malformed(legacyBoot, string(p.Boot), "a boot target (cure, disk or empty)")
	}
	for k, v := range data {
		switch {
		case strings.HasPrefix(k, legacyAttemptsPrefix):
			ph := modes.PhaseName(strings.TrimPrefix(k, legacyAttemptsPrefix))
			ps := p.Phase(ph)
			if ps.Attempts = int(l.int(k)); ps.Attempts < 0 {
				l.malformed(k, v, "a count (>= 0)")
			}
			p.SetPhase(ph, ps)
		case strings.HasPrefix(k, legacyStartedPrefix):
			ph := modes.PhaseName(strings.TrimPrefix(k, legacyStartedPrefix))
			ps := p.Phase(ph)
			ps.StartedAt = l.time(k)
			p.SetPhase(ph, ps)
		case strings.HasPrefix(k, legacyDeadlinePrefix):
			ph := modes.PhaseName(strings.TrimPrefix(k, legacyDeadlinePrefix))
			ps := p.Phase(ph)
			ps.Deadline = l.time(k)
			p.SetPhase(ph, ps)
		case strings.HasPrefix(k, legacyOOBPrefix):
			p.SetSubmission(strings.TrimPrefix(k, legacyOOBPrefix), LegacySubmission(v))
		}
	}
	if _, ok := data[legacyAssignCursor]; ok {
		// An assignment was outstanding: the batch it belonged to resumes
		// reading the runner's events from where it was sent (its phases
		// are the run's phases not completed yet: see the pipeline).
		p.Batch = &RunnerBatch{Cursor: l.int(legacyAssignCursor), HadRunner: true}
	}
	if l.err != nil {
		p.Malformed = l.err.Error()
	}
	return p
}

// upgradeRunData fills runs.pipeline from runs.data for every run
// (pipelineSchema).
func upgradeRunData(ctx context.Context, tx *sql.Tx, rebind func(string) string) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM runs WHERE data <> '' AND data <> '{}'`)
	if err != nil {
		return fmt.Errorf("read run data: %w", err)
	}
	type conv struct{ id, state string }
	var out []conv
	for rows.Next() {
		var id, raw string
		if err := rows.Scan(&id, &raw); err != nil {
			rows.Close()
			return fmt.Errorf("read run data: %w", err)
		}
		var p PipelineState
		if data, err := unmarshalMap(raw); err != nil {
			p.Malformed = fmt.Sprintf("run %s: data column is not a JSON object of strings: %v", id, err)
		} else {
			p = pipelineFromData(id, data)
		}
		s, err := marshalPipeline(p)
		if err != nil {
			rows.Close()
			return fmt.Errorf("run %s: %w", id, err)
		}
		out = append(out, conv{id, s})
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range out {
		if _, err := tx.ExecContext(ctx, rebind(`UPDATE runs SET pipeline = ? WHERE id = ?`), c.state, c.id); err != nil {
			return fmt.Errorf("run %s: write pipeline state: %w", c.id, err)
		}
	}
	return nil
}
