package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/artifactpeer"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// SharedConfig is what several instances behind one address share
// through their store: artifacts (any instance serves any of them), the
// manifests (one bundle in the store), the network boot front door (one
// instance answers proxy DHCP and TFTP at a time).
type SharedConfig struct {
	// ArtifactMirror is an object store's base URL: an artifact missing
	// here and at every peer instance is fetched from <mirror>/<sha256>
	// (--artifact-mirror; "": none).
	ArtifactMirror string
	// ManifestsFromStore loads the newest manifest bundle in the store
	// (provisioner-lite manifests push) instead of --manifests, and a
	// newer one as soon as it is pushed (--manifests-from-store).
	ManifestsFromStore bool
	// PeerURL is the base URL other instances fetch artifacts from this
	// very instance at, recorded in the registry (--peer-url; "": the
	// boot server's URL nodes use, which behind one load balancer is the
	// shared address and may land on any instance).
	PeerURL string
}

// checkPeerURL refuses a --peer-url that is not an http(s) base URL.
func checkPeerURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--peer-url %q: want an http:// or https:// base URL with a host (this instance's own address, reachable by the other instances)",
			textsafe.BoundedLine(textsafe.RedactURL(s), 200))
	}
	return nil
}

// FrontDoorLease is the named lease whose holder answers proxy DHCP and
// TFTP.
const FrontDoorLease = "proxy-dhcp"

// bundleDir is where the bundles from the store are written in the state
// dir; bundleCurrent, the link to the one this instance runs, is what
// Config.ManifestDir names.
const (
	bundleDir     = "manifest-bundles"
	bundleCurrent = "current"
)

// sharedState is this instance's part in the set of instances.
type sharedState struct {
	bundle    atomic.Int64 // the manifest bundle version running (0: --manifests)
	frontDoor atomic.Bool  // holds FrontDoorLease
	filler    *artifactpeer.Filler
}

// openShared loads the manifest bundle (with --manifests-from-store: the
// site is linted on it, as preflight lints --manifests otherwise) and
// prepares the artifact filler; it runs once the store is open.
func (d *daemon) openShared(ctx context.Context) error {
	c := &d.c
	d.shared = &sharedState{}
	if c.Shared.ManifestsFromStore {
		b, ok, err := d.st.NewestManifestBundle(ctx, 0)
		if err != nil {
			return fmt.Errorf("--manifests-from-store: %w", err)
		}
		if !ok {
			return errors.New("--manifests-from-store: the store holds no manifest bundle yet: push one with `provisioner-lite manifests push --db DSN DIR`")
		}
		dir, err := d.installBundle(b)
		if err != nil {
			return err
		}
		c.ManifestDir = dir
		d.site = sitecheck.Site(c.ManifestDir, c.NodesFile)
		if err := d.site.Err(); err != nil {
			return fmt.Errorf("refusing to start: manifest bundle %d from the store: %w", b.Version, err)
		}
		d.shared.bundle.Store(b.Version)
		d.log.Info("manifest bundle loaded from the store", "version", b.Version, "sha256", b.SHA256, "files", len(b.Files), "pushed_by", b.PushedBy)
	}
	d.obs.m.ManifestBundle(d.shared.bundle.Load())
	f, err := artifactpeer.New(artifactpeer.Config{Dir: d.sd.Join("artifacts"), Mirror: c.Shared.ArtifactMirror, Log: d.log,
		Peers: d.artifactPeers, Fetched: d.obs.m.ArtifactFetched})
	if err != nil {
		return err
	}
	d.shared.filler = f
	return nil
}

// artifactPeers are the other live instances' artifact URLs, never this
// instance's own (by id or URL).
func (d *daemon) artifactPeers(ctx context.Context) ([]artifactpeer.Source, error) {
	all, err := d.st.Instances(ctx, 3*d.st.LeaseTTL())
	if err != nil {
		return nil, err
	}
	reg := make([]artifactpeer.Peer, 0, len(all))
	for _, i := range all {
		reg = append(reg, artifactpeer.Peer{ID: i.ID, URL: i.ArtifactURL})
	}
	out, shared := artifactpeer.PeerSources(artifactpeer.Peer{ID: d.c.Instance, URL: d.peerURL()}, reg, "/artifacts/sha256")
	if len(shared) > 0 {
		d.log.Warn("peer instances registered with this instance's own peer URL are not asked (a shared address may land here): give each instance its own --peer-url",
			"instances", shared, "peer_url", d.peerURL())
	}
	return out, nil
}

// peerURL is what this instance registers for its peers: --peer-url, or
// the boot server's URL.
func (d *daemon) peerURL() string {
	if d.c.Shared.PeerURL != "" {
		return strings.TrimRight(d.c.Shared.PeerURL, "/")
	}
	return d.baseURL
}

// fill is the boot server's Config.Fill: nil where no instance could have
// what this one lacks (SQLite and no mirror).
func (d *daemon) fill() func(context.Context, string) error {
	if d.shared == nil || (!d.st.Shared() && d.c.Shared.ArtifactMirror == "") {
		return nil
	}
	return d.shared.filler.Ensure
}

// installBundle writes bundle b under the state dir and points the
// current link at it (renamed over the old link: a reader of the catalog
// sees the old bundle or the new, never a mix). Bundles older than the
// previous one are removed.
func (d *daemon) installBundle(b store.ManifestBundle) (string, error) {
	root := d.sd.Join(bundleDir)
	name := "v" + strconv.FormatInt(b.Version, 10)
	dir := filepath.Join(root, name)
	if err := os.RemoveAll(dir + ".tmp"); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	if err := writeFiles(dir+".tmp", b.Files); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	if err := os.Rename(dir+".tmp", dir); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	cur := filepath.Join(root, bundleCurrent)
	prev, _ := os.Readlink(cur)
	_ = os.Remove(cur + ".tmp")
	if err := os.Symlink(name, cur+".tmp"); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	if err := os.Rename(cur+".tmp", cur); err != nil {
		return "", fmt.Errorf("manifest bundle %d: %w", b.Version, err)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if n := e.Name(); n != name && n != prev && n != bundleCurrent && strings.HasPrefix(n, "v") {
			_ = os.RemoveAll(filepath.Join(root, n))
		}
	}
	return cur, nil
}

// runShared keeps this instance's part until ctx ends: its heartbeat in
// the registry, the front door's lease, a newer manifest bundle loaded.
func (d *daemon) runShared(ctx context.Context) {
	every := max(d.st.LeaseTTL()/3, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.sharedTick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *daemon) sharedTick(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, max(d.st.LeaseTTL()/3, time.Second))
	defer cancel()
	if err := d.st.Heartbeat(tctx, d.peerURL(), d.shared.bundle.Load()); err != nil && ctx.Err() == nil {
		d.log.Warn("instance heartbeat not recorded", "err", err)
	}
	if d.nb.serves() {
		d.keepFrontDoor(tctx)
	}
	if d.c.Shared.ManifestsFromStore {
		d.newerBundle(tctx)
	}
}

// keepFrontDoor takes or renews the front door's lease; a renewal that
// fails drops it (another instance takes over after the TTL, so this one
// must not answer beside it).
func (d *daemon) keepFrontDoor(ctx context.Context) {
	l, held, err := d.st.AcquireLease(ctx, FrontDoorLease, d.st.LeaseTTL())
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("front door lease not renewed: standing by", "err", err)
		}
		held = false
	}
	if was := d.shared.frontDoor.Swap(held); was != held {
		if held {
			d.log.Info("front door lease taken: this instance answers proxy DHCP and TFTP", "instance", d.c.Instance, "lease", FrontDoorLease)
		} else {
			d.log.Warn("front door lease lost: standing by", "instance", d.c.Instance, "holder", l.Holder)
		}
	}
	d.obs.m.FrontDoorHeld(held)
}

// releaseFrontDoor hands the lease back at shutdown so a standby takes it
// at once.
func (d *daemon) releaseFrontDoor() {
	if d.shared == nil || !d.shared.frontDoor.Swap(false) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.st.ReleaseLease(ctx, FrontDoorLease); err != nil {
		d.log.Warn("front door lease not handed back: a standby takes it after the TTL", "err", err)
	}
}

// newerBundle loads a manifest bundle newer than the one running, if the
// site lints clean on it; otherwise the running one stays.
func (d *daemon) newerBundle(ctx context.Context) {
	cur := d.shared.bundle.Load()
	b, ok, err := d.st.NewestManifestBundle(ctx, cur)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			d.log.Warn("manifest bundles not read", "err", err)
		}
		return
	}
	log := d.log.With("version", b.Version, "running", cur)
	dir := d.sd.Join(bundleDir, "check-v"+strconv.FormatInt(b.Version, 10))
	defer os.RemoveAll(dir)
	if err := writeFiles(dir, b.Files); err != nil {
		log.Error("newer manifest bundle not loaded", "err", err)
		return
	}
	if err := sitecheck.Site(dir, d.c.NodesFile).Err(); err != nil {
		log.Error("newer manifest bundle not loaded: the site does not lint on it", "err", err)
		return
	}
	if _, err := d.installBundle(b); err != nil {
		log.Error("newer manifest bundle not loaded", "err", err)
		return
	}
	d.shared.bundle.Store(b.Version)
	d.obs.m.ManifestBundle(b.Version)
	log.Info("manifest bundle loaded from the store", "sha256", b.SHA256, "files", len(b.Files), "pushed_by", b.PushedBy)
}

// writeFiles writes a bundle's files under dir (the lint's copy).
func writeFiles(dir string, files map[string][]byte) error {
	for rel, content := range files {
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("file %q: not a path inside the manifests directory", rel)
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// serves says whether this instance runs a network boot front door
// (proxy DHCP or TFTP): only then does it campaign for its lease.
func (p *netbootPlan) serves() bool { return p != nil && (p.flags.ProxyDHCP || p.tftpAddr != "") }

// frontDoorStandby is the network boot front door's Standby: true while
// another instance holds the lease.
func (d *daemon) frontDoorStandby() bool { return d.shared != nil && !d.shared.frontDoor.Load() }
