// Package siteprog runs a site's own check program (suite check type
// "site"): fetched from the coordinator's artifact server and verified
// against its pinned size and sha256, run in a sandbox (an unprivileged
// uid, a private mount namespace that hides the kernel command line and
// the kernel log, a private /tmp, a clean environment, no inherited file
// descriptors, its own PID namespace) under a time limit and an output
// bound, its stdout validated as JSON lines (schema.go) into verdicts.
// A program cannot name a run or a node: the schema has no such field,
// and the coordinator attributes every verdict to the session's run.
package siteprog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/checks"
)

// Defaults of a Runner.
const (
	DefaultMaxOutput   = 1 << 20 // bytes, each of stdout and stderr
	DefaultMaxVerdicts = 256
	DefaultKillGrace   = 5 * time.Second
)

// Program is one planned site check.
type Program struct {
	Check       string // the suite's check name
	Description string
	// URL is where the program is served (the coordinator's
	// /artifacts/sha256/<sha256>, or the suite's url).
	URL  string
	Want artifact.Want
	// Limit is the time limit: past it the program and its process group
	// are killed and the check is an ERROR.
	Limit time.Duration
	// Params are the suite's params, given to the program in its
	// environment (CURE_PARAM_<name>, and all of them as JSON in CURE_PARAMS).
	Params map[string]any
	// Network: the program sees the node's network (the suite's
	// `network: node`); otherwise a network namespace of its own.
	Network bool
}

// Runner runs site programs.
type Runner struct {
	HTTP    *http.Client
	Sandbox Sandbox
	// MaxOutput bounds stdout and stderr each; past it the program is
	// killed and the check refused. Zero: DefaultMaxOutput.
	MaxOutput int64
	// MaxVerdicts bounds the verdicts of one run. Zero: DefaultMaxVerdicts.
	MaxVerdicts int
	// KillGrace is how long a program over its time limit has between
	// SIGTERM and SIGKILL. Zero: DefaultKillGrace.
	KillGrace time.Duration
	Log       *slog.Logger
}

// Run fetches, verifies and runs p, and returns its verdicts. An error is
// the check's ERROR verdict: a program that could not be fetched or does
// not match its pin, one killed for its time limit or its output, and one
// whose output does not follow the schema report nothing else. A program
// that exits non-zero keeps its (valid) verdicts beside the error.
func (r Runner) Run(ctx context.Context, p Program) ([]checks.Verdict, error) {
	if r.MaxOutput <= 0 {
		r.MaxOutput = DefaultMaxOutput
	}
	if r.MaxVerdicts <= 0 {
		r.MaxVerdicts = DefaultMaxVerdicts
	}
	if r.KillGrace <= 0 {
		r.KillGrace = DefaultKillGrace
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("site program %s: no time limit", p.Check)
	}
	env, err := Environ(p)
	if err != nil {
		return nil, err
	}
	prog, err := artifact.Fetcher{Client: r.HTTP, Timeout: 5 * time.Minute, Limit: manifests.MaxSiteProgram}.Bytes(ctx, p.URL, p.Want)
	if err != nil {
		return nil, fmt.Errorf("site program refused: %w", err)
	}
	start := time.Now()
	sb := r.Sandbox
	sb.Network = p.Network
	res, err := sb.run(ctx, prog, env, p.Limit, r.MaxOutput, r.KillGrace)
	if err != nil {
		return nil, err
	}
	ran := time.Since(start).Round(time.Millisecond)
	stderr := ""
	if s := strings.TrimSpace(res.stderrTail); s != "" {
		stderr = "; stderr: " + s
	}
	switch {
	case res.overStdout:
		return nil, fmt.Errorf("site program refused: it printed more than %d bytes on stdout: killed with its process group, nothing it printed is reported", r.MaxOutput)
	case res.overStderr:
		return nil, fmt.Errorf("site program refused: it printed more than %d bytes on stderr: killed with its process group, nothing it printed is reported", r.MaxOutput)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("site program stopped after %s: %w", ran, ctx.Err())
	case res.timedOut:
		return nil, fmt.Errorf("site program refused: still running at its time limit %s: killed with its process group, nothing it printed is reported%s", p.Limit, stderr)
	}
	out, err := ParseOutput(res.stdout, r.MaxVerdicts)
	if err != nil {
		return nil, fmt.Errorf("site program output refused, nothing it printed is reported: %w", err)
	}
	if md := out.Metadata; md != nil {
		r.Log.Info("site program metadata", "check", p.Check, "name", md.Name, "description", md.Description, "timeout", md.Timeout, "parameters", md.Parameters)
		if md.Timeout > p.Limit {
			r.Log.Warn("site program declares a longer timeout than the suite gives it", "check", p.Check, "declared", md.Timeout, "limit", p.Limit)
		}
	}
	if err := CheckParams(out.Metadata, p.Params); err != nil {
		return nil, fmt.Errorf("site program refused: %w", err)
	}
	if res.exitErr != nil {
		return out.Verdicts, fmt.Errorf("site program %s after %s%s", res.exitErr, ran, stderr)
	}
	if len(out.Verdicts) == 0 {
		return nil, fmt.Errorf("site program printed no verdict (one JSON line per component: docs/VALIDATION.md, \"Writing a site check\")%s", stderr)
	}
	return out.Verdicts, nil
}

// Path is the sandbox's PATH: the CURE image's commands (/bin, /bbin)
// first.
const Path = "/bin:/bbin:/usr/bin:/sbin:/usr/sbin"

// Environ is the program's whole environment: nothing of the runner's.
func Environ(p Program) ([]string, error) {
	env := []string{
		"PATH=" + Path,
		"HOME=" + WorkDir,
		"TMPDIR=" + WorkDir,
		"CURE_CHECK=" + p.Check,
		"CURE_TIMEOUT_SECONDS=" + strconv.FormatInt(int64(p.Limit.Round(time.Second)/time.Second), 10),
	}
	params := p.Params
	if params == nil {
		params = map[string]any{}
	}
	all, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("site check %s: params: %w", p.Check, err)
	}
	env = append(env, "CURE_PARAMS="+string(all))
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !ParamRE.MatchString(k) {
			return nil, fmt.Errorf("site check %s: param %q is not a parameter name (letters, digits, '_'; not starting with a digit)", p.Check, k)
		}
		v := ParamString(params[k])
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("site check %s: param %s holds a NUL byte", p.Check, k)
		}
		env = append(env, "CURE_PARAM_"+k+"="+v)
	}
	return env, nil
}

// ParamString is a param's value in CURE_PARAM_<name>: scalars as YAML
// wrote them, lists joined with commas.
func ParamString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = ParamString(e)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// result is what one sandboxed run produced.
type result struct {
	stdout                 []byte
	stderrTail             string
	overStdout, overStderr bool
	timedOut               bool
	exitErr                error // non-zero exit or a signal; nil on exit 0
}

// errOver stops os/exec's copy from a stream past its bound.
var errOver = errors.New("output bound reached")
