package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/hostaddr"
	"github.com/cure-oss/cure/provisioner-lite/notify"
	"github.com/cure-oss/cure/provisioner-lite/pacing"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/redfish/bmcpool"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// daemon is one Serve: what its steps open, in the order they open it.
// cleanup closes what they opened, last first, as defers would.
type daemon struct {
	c        Config
	log      *slog.Logger
	stop     context.CancelFunc // ends the Serve's context
	closers  []func()
	site     *sitecheck.Result
	plan     listenerPlan
	sd       *statedir.Dir
	pkiDir   string
	st       *store.Store
	obs      *observability
	notifier *notify.Notifier

	artifactDir string
	toolBundle  *pipeline.ToolBundle

	// serving: the servers own the listeners (they close them).
	serving           bool
	hl, gl, htl       net.Listener
	baseURL, httpsURL string
	tlsCfg, httpsCfg  *tls.Config

	nb      *netbootPlan
	ekRoots *attestation.EKRoots
	bmcs    *bmcpool.Connector
	bmcPool *bmcpool.Pool
	rec     *audit.Recorder
	shared  *sharedState // several instances: instances.go

	services
}

// onClose registers f to run when Serve returns.
func (d *daemon) onClose(f func()) { d.closers = append(d.closers, f) }

func (d *daemon) cleanup() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// preflight checks what needs nothing opened: the site's configuration
// (the same lint as `provisioner-lite check`, before anything is created:
// a site's mistake is reported whole, with file:line, instead of as a run
// that fails three times on a manifest it cannot read), the listeners'
// caps against the descriptors this process may open, the address nodes
// reach.
func (d *daemon) preflight(context.Context) error {
	c := &d.c
	if c.Shared.ManifestsFromStore {
		d.log.Info("manifests from the store: the site is linted on the newest bundle once the store is open")
	} else if d.site = sitecheck.Site(c.ManifestDir, c.NodesFile); d.site.Err() != nil {
		err := d.site.Err()
		return fmt.Errorf("refusing to start: %w\n(`provisioner-lite check --manifests %s --nodes %s` lists the same)", err, c.ManifestDir, c.NodesFile)
	}
	fdLimit, err := nofileLimit()
	if err != nil {
		return err
	}
	if d.plan, err = planListeners(*c, fdLimit); err != nil {
		return err
	}
	d.plan.log(d.log)
	if c.Advertise == "" {
		a, why, err := hostaddr.Advertise(nonEmpty(c.ProcRoot, "/proc"), c.PXEInterface, hostaddr.InterfaceAddrs)
		if err != nil {
			return err
		}
		d.log.Info("advertising the address nodes reach this coordinator at", "advertise", a, "chosen_as", why)
		c.Advertise = a
	}
	return nil
}

// openState opens the state dir (its lock keeps a second coordinator
// out), the CA, the store, the metrics and the webhook notifier.
func (d *daemon) openState(context.Context) error {
	c, log := &d.c, d.log
	sd, err := statedir.Open(c.StateDir, log)
	if err != nil {
		return err
	}
	d.sd = sd
	d.onClose(func() { sd.Close() })
	d.pkiDir = sd.Join("pki")
	caPEM, err := pki.EnsureCA(d.pkiDir)
	if err != nil {
		return err
	}
	// An image that trusts another CA boots runners that never register:
	// refuse now, saying which state dir to build it from.
	if ca, err := pki.CheckImageCA(c.ImageDir, caPEM, c.StateDir); errors.Is(err, pki.ErrNoImageReport) {
		log.Warn("the image's CA cannot be checked: if its runners do not register, rebuild it with cure-build --state-dir", "image_dir", c.ImageDir, "err", err)
	} else if err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	} else {
		log.Info("the image trusts this coordinator's CA", "image_dir", c.ImageDir, "ca", ca.Fingerprint)
	}
	if err := checkArchImages(c, d.siteSKUs(), caPEM, log); err != nil {
		return err
	}
	dsn := c.DB
	if dsn == "" {
		dsn = sd.Join(statedir.DBFile)
	} else if !store.IsPostgresDSN(dsn) {
		return fmt.Errorf("--db %s: not a PostgreSQL DSN (postgres://… or host=… dbname=…); leave it empty for SQLite in the state dir", store.Redacted(dsn))
	}
	// Instances sharing a database must share the state key too (copy
	// state.key and pki/ca*.pem to each instance's state dir): the secrets
	// in the database are sealed with it.
	st, err := store.OpenDSN(dsn, store.WithStateKey(sd.Key), store.WithInstance(c.Instance), store.WithLeaseTTL(c.LeaseTTL))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	d.st = st
	d.onClose(func() { st.Close() })
	d.obs = newObservability(st)
	if d.notifier, err = newNotifier(c.Webhooks, nonEmpty(c.WebhookSecretFile, sd.Join("webhook.secret")), d.obs.m, log); err != nil {
		return err
	}
	d.onClose(func() {
		// Queued webhooks get a few seconds; the rest are abandoned (logged).
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.notifier.Close(cctx)
	})
	return nil
}

// importSite imports the nodes file (one transaction: whole or not at
// all), the artifacts and the tool bundle, and says what the site lacks.
func (d *daemon) importSite(ctx context.Context) error {
	c, log := &d.c, d.log
	if c.NodesFile != "" {
		for _, n := range d.site.Nodes {
			if n.BMCInsecure {
				log.Warn("BMC TLS verification is off for this node, as its inventory says: a peer on the BMC network can read its password",
					"node", n.ID, "bmc", n.BMCURL)
			}
		}
		added, updated, err := d.st.PutNodes(ctx, d.site.Nodes, true)
		if err != nil {
			return fmt.Errorf("import %s: %w", c.NodesFile, err)
		}
		log.Info("node inventory imported", "file", c.NodesFile, "nodes", len(d.site.Nodes), "added", len(added), "updated", len(updated))
		warnUnlistedNICs(ctx, d.st, d.site.Nodes, log)
	}
	d.artifactDir = d.sd.Join("artifacts")
	for _, f := range c.ImportArtifacts {
		sum, size, err := bootserver.ImportArtifact(d.artifactDir, f)
		if err != nil {
			return fmt.Errorf("import artifact %s: %w", f, err)
		}
		log.Info("artifact imported", "file", f, "sha256", sum, "size", size)
	}
	if c.ToolBundle != "" {
		tb, err := importToolBundle(d.artifactDir, c.ToolBundle)
		if err != nil {
			return err
		}
		d.toolBundle = tb
		log.Info("tool bundle served", "file", c.ToolBundle, "sha256", tb.SHA256, "size", tb.Size, "tools", tb.Tools)
	}
	if msg := imageToolBundleProblem(c.ImageDir, d.toolBundle); msg != "" {
		log.Warn(msg, "image_dir", c.ImageDir)
	}
	// A SKU whose image is missing is not a reason to refuse: the image
	// may be added while the coordinator runs (artifacts add).
	d.site.Images(c.StateDir)
	for _, p := range d.site.Problems {
		log.Warn("the site is not ready to provision", "problem", p)
	}
	return nil
}

// openListeners binds the listeners first: the URLs nodes are given name
// the ports actually bound (":0" and inherited sockets work). Until the
// servers take them, cleanup closes them.
func (d *daemon) openListeners(context.Context) error {
	c := &d.c
	var err error
	if d.hl, err = openListener(c.HTTPListen); err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	hl := d.hl
	if d.gl, err = openListener(c.GRPCListen); err != nil {
		hl.Close()
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	gl := d.gl
	d.onClose(func() {
		if !d.serving {
			hl.Close()
			gl.Close()
		}
	})
	d.baseURL = "http://" + net.JoinHostPort(c.Advertise, listenerPort(hl))
	if c.HTTPSListen != "" {
		htl, err := openListener(c.HTTPSListen)
		if err != nil {
			return fmt.Errorf("--https-listen: %w", err)
		}
		d.htl = htl
		d.onClose(func() {
			if !d.serving {
				htl.Close()
			}
		})
		d.httpsURL = "https://" + net.JoinHostPort(c.Advertise, listenerPort(htl))
	}
	if d.tlsCfg, err = pki.ServerTLSConfig(d.pkiDir, ServerHosts(c.Advertise, c.TLSNames...)); err != nil {
		return err
	}
	if d.htl != nil {
		if d.httpsCfg, err = httpsBootTLS(d.pkiDir, *c, d.log); err != nil {
			return fmt.Errorf("refusing to start: --https-listen: %w", err)
		}
	}
	return nil
}

// prepareBMCs checks the network boot flags and the attestation set-up,
// and starts the BMC session pool and the audit recorder.
func (d *daemon) prepareBMCs(ctx context.Context) error {
	c, log := &d.c, d.log
	c.Netboot.pxeInterface = c.PXEInterface
	nb, err := c.Netboot.prepare(log)
	if err != nil {
		return err
	}
	d.nb = nb
	if d.ekRoots, err = loadEKRoots(c.EKRoots, log); err != nil {
		return err
	}
	if err := attestationConfig(d.site.SKUs, catalogRequires(c.ManifestDir), c.ImageDir, d.ekRoots, log); err != nil {
		return err
	}
	if d.bmcs, err = bmcpool.NewConnector(c.BMCCA, c.Timeouts.BMCCall, log); err != nil {
		return err
	}
	d.bmcs.BootMode, d.bmcs.HTTPBootURI = nb.mode, nb.httpBootURI(d.baseURL)
	if d.httpsURL != "" && nb.target == redfish.BootUefiHttp {
		// Verified network boot: the firmware loads the signed image over
		// HTTPS instead of iPXE over HTTP.
		if _, err := os.Stat(filepath.Join(c.ImageDir, bootserver.UKI)); err != nil {
			log.Warn("UEFI HTTP boot points at the signed image, which is not built yet: build it with cure-build --state-dir (Secure Boot key in pki/)", "err", err)
		}
		d.bmcs.HTTPBootURI = d.httpsURL + "/image/" + bootserver.UKI
	}
	var groupKeys []string
	for _, k := range strings.Split(c.PowerGroupLabels, ",") {
		if k = strings.TrimSpace(k); k != "" {
			groupKeys = append(groupKeys, k)
		}
	}
	d.bmcPool = bmcpool.New(d.bmcs, c.BMCIdle, c.BMCMaxInflight, c.BMCMaxLogins, &pacing.Pacer{Rate: c.PowerOnRate, Burst: c.PowerOnBurst}, groupKeys, log)
	d.bmcPool.OnRetry = d.obs.m.RedfishHTTPRetry
	go d.bmcPool.Run(ctx)
	d.rec = audit.New(d.st, log, 0)
	// What the audit budgets held back is summed periodically, and once
	// more before the store closes.
	go d.rec.Run(ctx)
	d.onClose(func() { d.rec.Flush(context.Background()) })
	return nil
}
