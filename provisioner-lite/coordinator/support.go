package coordinator

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// ServerHosts are the names the server certificate carries: the address
// nodes use, and loopback for curectl on the coordinator host.
func ServerHosts(advertise string, extra ...string) []string {
	hosts := []string{"127.0.0.1", "localhost"}
	if advertise != "" && advertise != "127.0.0.1" && advertise != "localhost" {
		hosts = append([]string{advertise}, hosts...)
	}
	for _, h := range extra {
		for _, n := range strings.Split(h, ",") {
			if n = strings.TrimSpace(n); n != "" && !slices.Contains(hosts, n) {
				hosts = append(hosts, n)
			}
		}
	}
	return hosts
}

// httpsBootTLS is the HTTPS boot listener's TLS configuration, checked
// before anything serves: an offline-issued listener certificate that
// firmware would refuse stops the start; one expiring within 30 days is
// warned about at every start.
func httpsBootTLS(pkiDir string, c Config, log *slog.Logger) (*tls.Config, error) {
	now := time.Now()
	cfg, boot, err := pki.HTTPSTLSConfig(pkiDir, ServerHosts(c.Advertise, c.TLSNames...), []string{c.Advertise}, now)
	if err != nil {
		return nil, err
	}
	if !boot.Offline {
		log.Info("HTTPS boot listener certificate issued by the boot CA's key in the state dir", "not_after", boot.NotAfter.UTC().Format(time.RFC3339))
		return cfg, nil
	}
	if left := boot.NotAfter.Sub(now); left < pki.ListenerRenewWarning {
		log.Warn("the HTTPS boot listener's certificate expires soon: reissue it on the key host (provisioner-lite pki offline --host ...) and copy it here (docs/KEYS.md)",
			"file", boot.File, "not_after", boot.NotAfter.UTC().Format(time.RFC3339), "days_left", int(left.Hours()/24))
	} else {
		log.Info("HTTPS boot listener certificate issued offline", "file", boot.File, "not_after", boot.NotAfter.UTC().Format(time.RFC3339))
	}
	return cfg, nil
}

// logStats logs the store's cumulative write counters (the fleet simulator
// reads commits= from the last line of each process).
func logStats(log *slog.Logger, st *store.Store, eng *pipeline.Engine) {
	s := st.Stats()
	var avg time.Duration
	if s.Commits > 0 {
		avg = s.CommitTime / time.Duration(s.Commits)
	}
	log.Info("store stats", "commits", s.Commits, "ops", s.Ops, "batched_ops", s.BatchedOps, "max_batch", s.MaxBatch,
		"failed_commits", s.FailedCommits, "commit_avg", avg, "active_runs", eng.Active())
}

// joinAddrs is the cure.coordinator list: this instance first, then its peers.
func joinAddrs(own, peers string) string {
	out := []string{own}
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" && p != own {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// loadEKRoots reads --ek-roots; without it EKs are trusted on first use,
// which the log says once at start.
func loadEKRoots(dir string, log *slog.Logger) (*attestation.EKRoots, error) {
	if dir == "" {
		log.Warn("no --ek-roots: a node's endorsement key is trusted on first use unless the nodes file pins its ek_sha256, except on a SKU that requires attestation, where only a pinned EK enrols (docs/SECURITY.md)")
		return nil, nil
	}
	r, err := attestation.LoadEKRoots(dir)
	if err != nil {
		return nil, fmt.Errorf("--ek-roots: %w", err)
	}
	log.Info("EK certificates must chain to the EK roots", "dir", dir, "roots", r.Count)
	return r, nil
}

// quarantineOnDrift keeps a node whose firmware measurements drifted out
// of service in the pool (the hold itself is in the store already).
func quarantineOnDrift(p *pool.Pool, log *slog.Logger) func(ctx context.Context, nodeID, runID, detail string) {
	return func(ctx context.Context, nodeID, runID, detail string) {
		if err := p.Quarantine(ctx, nodeID, runID, "firmware measurement drift: "+detail); err != nil {
			log.Error("node not quarantined after a measurement drift (its hold still keeps its boots out)", "node", nodeID, "run", runID, "err", err)
		}
	}
}

// reconsiderOnAccept lets the pool judge a node's admission again once
// an admin accepted its drifted measurements.
func reconsiderOnAccept(p *pool.Pool, log *slog.Logger) func(ctx context.Context, nodeID, actor, reason string) {
	return func(ctx context.Context, nodeID, actor, reason string) {
		if err := p.Reconsider(ctx, nodeID, actor, "firmware measurements accepted: "+reason); err != nil {
			log.Error("node's admission not reconsidered after its measurements were accepted", "node", nodeID, "err", err)
		}
	}
}
