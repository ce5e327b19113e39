// Package enlist lets machines that no node's inventory names enlist
// themselves (provisioner-lite --enlist, docs/SECURITY.md "Enlistment"):
// an unknown MAC that network-boots gets CURE in inspect mode with a
// discovery token, the runner reports what the machine is, and the
// coordinator keeps it as a discovered record, with the SKU and name the
// manifests' inspection rules propose, until an operator approves it into
// a node. A discovery token opens the inspection report and nothing else:
// it lives in the discovered table, not among the boot tokens, so no
// session, assignment, PSID, BMC credential or host token is reachable
// with it. Records are capped and every source's boots and reports are
// rate-limited, as every unauthenticated path is.
package enlist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
)

// Defaults of Config's bounds.
const (
	DefaultMax       = 256              // discovered records not yet approved
	DefaultTokenTTL  = 30 * time.Minute // boot to report
	DefaultRate      = 1.0 / 30         // a source's boots (and reports) a second
	DefaultBurst     = 4
	maxReportBytes   = 1 << 20
	maxHostIfaces    = 8
	maxDrives        = 256
	maxNeighbours    = 256
	maxReportedField = 256
)

// Config wires an Enlister.
type Config struct {
	Store *store.Store
	Audit *audit.Recorder
	Log   *slog.Logger
	// BaseURL and RunnerAddr are the HTTP server and gRPC endpoint as
	// machines reach them, for the inspect boot's command line.
	BaseURL, RunnerAddr string
	// Max caps the discovered records not yet approved (DefaultMax).
	Max int
	// TokenTTL bounds a discovery token's life (DefaultTokenTTL).
	TokenTTL time.Duration
	// Rate and Burst budget each source address's enlistment boots, and
	// separately its reports (DefaultRate, DefaultBurst).
	Rate  float64
	Burst int
	// SKUs are the manifests' SKUs whose inspection rules propose; nil:
	// no proposals.
	SKUs func() []*manifests.SKU
}

// Enlister answers unknown MACs' boots and their inspection reports.
type Enlister struct {
	cfg     Config
	boots   *peerlimit.Keyed
	reports *peerlimit.Keyed
}

// New returns an Enlister with cfg's zero bounds defaulted.
func New(cfg Config) *Enlister {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Audit == nil {
		cfg.Audit = audit.New(cfg.Store, cfg.Log, 0)
	}
	return &Enlister{cfg: cfg, boots: peerlimit.NewKeyed(cfg.Rate, cfg.Burst, 0), reports: peerlimit.NewKeyed(cfg.Rate, cfg.Burst, 0)}
}

// Max is the cap on discovered records.
func (e *Enlister) Max() int { return e.cfg.Max }

// Boot answers a network boot of mac, which is in no node's inventory,
// from peer: CURE in inspect mode with a fresh discovery token, unless
// peer is over its budget or the records are at their cap (both wrap
// bootgate.ErrRateLimited, a 429).
func (e *Enlister) Boot(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	if err := modes.CheckWrite(modes.Inspect, "enlist"); err == nil {
		return bootgate.Decision{}, errors.New("enlist: mode inspect may write: refusing to boot it")
	}
	if !e.boots.Allow(peer) {
		return bootgate.Decision{}, e.refused(ctx, mac, peer, fmt.Sprintf("enlistment boots from %s over its budget (%g a second, burst %d)", peer, e.cfg.Rate, e.cfg.Burst))
	}
	tok := bootgate.NewToken()
	id, err := e.cfg.Store.EnlistBoot(ctx, store.Discovered{MAC: mac, Peer: peer, TokenHash: store.TokenHash(tok),
		TokenExpires: time.Now().Add(e.cfg.TokenTTL)}, e.cfg.Max)
	switch {
	case errors.Is(err, store.ErrDiscoveredFull):
		return bootgate.Decision{}, e.refused(ctx, mac, peer, fmt.Sprintf("discovered machines at their cap (%d): approve or remove some", e.cfg.Max))
	case errors.Is(err, store.ErrNodeExists):
		return bootgate.Decision{Boot: false, Reason: "enlisted machine " + store.DiscoveredID(mac) + " was approved already"}, nil
	case err != nil:
		return bootgate.Decision{}, err
	}
	e.cfg.Log.Info("enlist: unknown MAC boots CURE in inspect mode", "mac", mac, "peer", peer, "discovered", id)
	return bootgate.Decision{
		Boot:    true,
		Cmdline: fmt.Sprintf("cure.coordinator=%s cure.http=%s cure.mode=inspect cure.enlist=%s", e.cfg.RunnerAddr, e.cfg.BaseURL, tok),
		Reason:  "enlistment: inspect as " + id,
	}, nil
}

func (e *Enlister) refused(ctx context.Context, mac, peer, why string) error {
	e.cfg.Audit.Security(ctx, store.AuditEntry{Actor: mac, Peer: peer, Action: audit.EnlistRefused, Result: "refused", Detail: why})
	return fmt.Errorf("enlist %s: %s: %w", mac, why, bootgate.ErrRateLimited)
}

// Errors Inspect wraps, for the RPC's status.
var (
	ErrToken    = errors.New("unknown, used or expired discovery token")
	ErrLimited  = errors.New("inspection reports over budget")
	ErrTooLarge = errors.New("inspection report too large")
)

// Inspect keeps rep as its token's discovered record (the token is spent)
// and returns the record's id.
func (e *Enlister) Inspect(ctx context.Context, rep *curev1.InspectReport, peer string) (string, error) {
	if !e.reports.Allow(peer) {
		e.cfg.Audit.Security(ctx, store.AuditEntry{Peer: peer, Action: audit.EnlistRefused, Result: "refused", Detail: "inspection reports over the source's budget"})
		return "", ErrLimited
	}
	hash := store.TokenHash(rep.GetToken())
	d, err := e.cfg.Store.DiscoveredByToken(ctx, hash)
	if err != nil {
		e.cfg.Audit.Security(ctx, store.AuditEntry{Peer: peer, Action: audit.EnlistRefused, Result: "refused", Detail: "inspection report: " + err.Error()})
		return "", fmt.Errorf("%w: %w", ErrToken, err)
	}
	rep = proto.CloneOf(rep)
	rep.Token = ""
	if err := bound(rep); err != nil {
		return "", err
	}
	raw, err := proto.Marshal(rep)
	if err != nil {
		return "", fmt.Errorf("inspection report of %s: %w", d.ID, err)
	}
	if err := e.cfg.Store.RecordInspection(ctx, hash, raw); err != nil {
		return "", fmt.Errorf("%w: %w", ErrToken, err)
	}
	e.cfg.Log.Info("enlist: inspection report kept", "discovered", d.ID, "mac", d.MAC, "peer", peer)
	return d.ID, nil
}

// bound refuses a report past the sizes a real machine sends and
// shortens its free text.
func bound(rep *curev1.InspectReport) error {
	if n := proto.Size(rep); n > maxReportBytes {
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrTooLarge, n, maxReportBytes)
	}
	if len(rep.GetBmc()) > maxHostIfaces || len(rep.GetDrives()) > maxDrives || len(rep.GetLldp()) > maxNeighbours {
		return fmt.Errorf("%w: %d host interfaces, %d drives, %d LLDP neighbours (at most %d, %d, %d)", ErrTooLarge,
			len(rep.GetBmc()), len(rep.GetDrives()), len(rep.GetLldp()), maxHostIfaces, maxDrives, maxNeighbours)
	}
	rep.BootId = textsafe.BoundedLine(rep.GetBootId(), 128)
	rep.RunnerVersion = textsafe.BoundedLine(rep.GetRunnerVersion(), 128)
	rep.Arch = textsafe.BoundedLine(rep.GetArch(), 32)
	for _, d := range rep.GetDrives() {
		d.Note = textsafe.BoundedLine(d.GetNote(), maxReportedField)
	}
	return nil
}
