package bmcpool

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Connector opens Redfish clients with each node's TLS policy from the
// inventory: its pinned fingerprint, else its caFile, else --bmc-ca, else
// the system roots; insecure only where the node says so. CA files are read
// once each; passwords are read at every connection (env or file
// references), so a rotated password needs no restart.
type Connector struct {
	defaultCA string // --bmc-ca; "" = the system roots
	timeout   time.Duration
	log       *slog.Logger
	// BootMode and HTTPBootURI go to every client (--boot-mode; the iPXE
	// EFI build's URL for UefiHttp overrides).
	BootMode    redfish.BootModePolicy
	HTTPBootURI string

	mu    sync.Mutex
	pools map[string]*x509.CertPool // CA file -> its certificates
}

// NewConnector checks --bmc-ca at start: a bad bundle is a startup error,
// not a failure of the first run.
func NewConnector(defaultCA string, timeout time.Duration, log *slog.Logger) (*Connector, error) {
	b := &Connector{defaultCA: defaultCA, timeout: timeout, log: log, pools: map[string]*x509.CertPool{}}
	if defaultCA != "" {
		if _, err := b.pool(defaultCA); err != nil {
			return nil, fmt.Errorf("--bmc-ca: %w", err)
		}
	}
	return b, nil
}

func (b *Connector) pool(path string) (*x509.CertPool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.pools[path]; ok {
		return p, nil
	}
	p, err := nodes.LoadCABundle(path)
	if err != nil {
		return nil, err
	}
	b.pools[path] = p
	return p, nil
}

// Endpoint is node n's BMC as redfish.Connect takes it.
func (b *Connector) Endpoint(n store.Node) (redfish.Endpoint, error) {
	pw, err := nodes.ResolvePassword(n)
	if err != nil {
		return redfish.Endpoint{}, err
	}
	ep := redfish.Endpoint{URL: n.BMCURL, Username: n.BMCUser, Password: pw, Fingerprint: n.BMCFingerprint, Insecure: n.BMCInsecure,
		PasswordFrom: nodes.PasswordSource(n)}
	ca := b.defaultCA
	if n.BMCCAFile != "" {
		ca = n.BMCCAFile
	}
	if ca != "" && !n.BMCInsecure && n.BMCFingerprint == "" {
		if ep.RootCAs, err = b.pool(ca); err != nil {
			return redfish.Endpoint{}, fmt.Errorf("node %s: BMC CA bundle: %w", n.ID, err)
		}
	}
	return ep, nil
}

// Connect is a Redfish client of its own (pipeline.Config.ConnectBMC
// without the pool).
func (b *Connector) Connect(ctx context.Context, n store.Node) (pipeline.BMC, error) {
	ep, err := b.Endpoint(n)
	if err != nil {
		return nil, err
	}
	return redfish.Connect(ctx, ep, redfish.Options{Timeout: b.timeout, Logger: b.log.With("node", n.ID),
		BootMode: b.BootMode, HTTPBootURI: b.HTTPBootURI})
}
