package bootgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Config wires the gate. The pipeline fills it from its own configuration
// (pipeline.Config documents the fields) and its run controls.
type Config struct {
	Store *store.Store
	Hub   *sessions.Hub
	Audit *audit.Recorder
	// BaseURL and RunnerAddr are the HTTP server and gRPC endpoint as
	// nodes reach them, for a CURE boot's command line.
	BaseURL, RunnerAddr string
	// WaitForCURE bounds a boot token's life; HostOS the wait for the
	// installed OS after the reboot out of CURE.
	WaitForCURE, HostOS time.Duration
	ClaimSettle         time.Duration
	TokensPerWindow     int
	TokensPerNode       int
	TokenPeriod         time.Duration
	BootIPUnbound       bool
	// Event records a coordinator entry on run r's timeline.
	Event func(ctx context.Context, r store.Run, phase modes.PhaseName, kind runstate.EventKind, status, msg string, dur time.Duration)
	// Stop ends a run from outside its pipeline, in status with msg.
	Stop func(runID string, status curev1.RunStatus, msg string)
	// HostAccepted is told of an accepted host callback of run r, with the
	// digest of the host token it used.
	HostAccepted func(ctx context.Context, r store.Run, digest string)
	// Enlist, if set (--enlist), answers a MAC in no node's inventory
	// (provisioner-lite/enlist: CURE in inspect mode with a discovery
	// token); nil: such a MAC is refused.
	Enlist func(ctx context.Context, mac, peer string) (Decision, error)
}

// Gate answers network boots and host callbacks for the runs in the store.
type Gate struct {
	cfg    Config
	tokens *tokenLimiter
	// waits are the runs in wait_for_cure, for UnknownMAC.
	waits cureWaits
}

// New returns a gate; cfg's limits must be set (pipeline.Config's defaults).
func New(cfg Config) *Gate {
	return &Gate{cfg: cfg, tokens: newTokenLimiter(cfg.TokensPerNode, cfg.TokenPeriod)}
}

// WaitForCURE says run r waits for its runner to register, so that network
// boots of unknown MACs are shown on its timeline until EndWaitForCURE
// (and those of the moment before, which may be its node's).
func (g *Gate) WaitForCURE(r store.Run) { g.showRecentUnknown(r, g.waits.add(r, time.Now())) }

// EndWaitForCURE ends WaitForCURE.
func (g *Gate) EndWaitForCURE(runID string) { g.waits.remove(runID) }

// NewToken returns a 256-bit random token.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// nonEmpty is s as a string (a phase name or any string), or def when s
// is empty.
func nonEmpty[S ~string](s S, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}
