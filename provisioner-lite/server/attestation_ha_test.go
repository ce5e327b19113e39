package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
	runnerattest "github.com/cure-oss/cure/runner/attestation"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/swtpmtest"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// attestNode is the node every test here boots: one MAC, one serial.
const (
	attestNodeID  = "tpm-node"
	attestMAC     = "52:54:00:7a:00:01"
	attestSerial  = "TPM-S1"
	attestSKUName = "tpm-sku"
)

// requireAttestation is a measured-boot policy whose SKU requires
// attestation (so a failed or refused one is never let through), booting
// the image attestTPM.boot starts.
type requireAttestation struct{}

func (requireAttestation) ImageUKI() *imagereport.UKI {
	app := sha256.Sum256([]byte("cure image"))
	return &imagereport.UKI{AuthenticodeSHA256: hex.EncodeToString(app[:])}
}
func (requireAttestation) Required(context.Context, store.Node) (bool, error) { return true, nil }

// attestCoord is one coordinator instance: runner and operator services on
// a real TLS listener with the operator authorization provisioner-lite uses.
type attestCoord struct {
	t      *testing.T
	st     *store.Store
	hub    *sessions.Hub
	gs     *grpc.Server
	addr   string
	caPEM  []byte
	pkiDir string
	conns  []*grpc.ClientConn
}

func startAttestCoord(t *testing.T, st *store.Store, pkiDir, instance string, runner func(*server.RunnerService), op func(*server.OperatorService)) *attestCoord {
	t.Helper()
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := pki.EnsureCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("instance", instance)
	rec := audit.New(st, log, time.Millisecond)
	c := &attestCoord{t: t, st: st, hub: sessions.NewHub(), caPEM: caPEM, pkiDir: pkiDir}
	rs := &server.RunnerService{Store: st, Hub: c.hub, Log: log, Audit: rec, Instance: instance, Attestation: requireAttestation{}}
	if runner != nil {
		runner(rs)
	}
	ops := &server.OperatorService{Store: st, Instance: instance, Log: log}
	if op != nil {
		op(ops)
	}
	c.gs = grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.OperatorAuth(rec, log)...)...)
	curev1.RegisterRunnerServiceServer(c.gs, rs)
	curev1.RegisterOperatorServiceServer(c.gs, ops)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go c.gs.Serve(l)
	c.addr = l.Addr().String()
	t.Cleanup(c.stop)
	return c
}

func (c *attestCoord) stop() {
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
	c.gs.Stop()
}

func (c *attestCoord) dial(cert *tls.Certificate) *grpc.ClientConn {
	c.t.Helper()
	cfg, err := pki.ClientTLSConfig(c.caPEM, "127.0.0.1", cert)
	if err != nil {
		c.t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns = append(c.conns, conn)
	return conn
}

func (c *attestCoord) runner() curev1.RunnerServiceClient {
	return curev1.NewRunnerServiceClient(c.dial(nil))
}

// operator is an OperatorService client with a certificate of role.
func (c *attestCoord) operator(name string, role pki.Role) curev1.OperatorServiceClient {
	c.t.Helper()
	oc, err := pki.IssueOperatorCert(c.pkiDir, name, role)
	if err != nil {
		c.t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(oc.CertFile, oc.KeyFile)
	if err != nil {
		c.t.Fatal(err)
	}
	return curev1.NewOperatorServiceClient(c.dial(&cert))
}

// attestTPM is the node's TPM (a swtpm whose state survives reboots) with
// the firmware measurements of its current boot.
type attestTPM struct {
	t   *testing.T
	sw  *swtpmtest.TPM
	mu  sync.Mutex
	log []byte
}

func newAttestTPM(t *testing.T) *attestTPM {
	return &attestTPM{t: t, sw: swtpmtest.Start(t, "")}
}

// boot restarts the TPM (PCRs reset) and measures firmware fw into it.
func (n *attestTPM) boot(fw string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sw.Restart()
	b := n.sw.Measure()
	app := sha256.Sum256([]byte("cure image"))
	b.Firmware(fw, app[:])
	n.log = b.Log.Bytes()
}

type keepOpen struct{ transport.TPM }

func (keepOpen) Close() error { return nil }

// attest is the real runner's exchange (runner/attestation) with c.
func (n *attestTPM) attest(ctx context.Context, c curev1.RunnerServiceClient, token, bootID string) *curev1.Attestation {
	n.t.Helper()
	a := runnerattest.Attest(ctx, runnerattest.Source{
		Open: func() (transport.TPMCloser, error) { return keepOpen{n.sw.Open()}, nil },
		EventLog: func() ([]byte, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.log, nil
		},
	}, c, token, bootID)
	if a.GetError() != "" || a.GetChallengeId() == "" {
		n.t.Fatalf("attestation exchange: %q", a.GetError())
	}
	return a
}

// ekPublic is the TPM's EK as the runner derives it.
func (n *attestTPM) ekPublic() []byte {
	n.t.Helper()
	k, err := attest.NewKeys(n.sw.Open())
	if err != nil {
		n.t.Fatal(err)
	}
	defer k.Close()
	return k.EKPublic
}

// pin makes the node (once) and pins its EK to this TPM's, as the nodes
// file's ek_sha256 does.
func (n *attestTPM) pin(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.GetNode(ctx, attestNodeID); errors.Is(err, store.ErrNotFound) {
		if err := st.UpsertNode(ctx, store.Node{ID: attestNodeID, BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: attestSKUName,
			MACs: []string{attestMAC}, SystemSerial: attestSerial}); err != nil {
			t.Fatal(err)
		}
	}
	fp, err := attest.EKFingerprint(n.ekPublic())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PinEK(ctx, attestNodeID, fp, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// optionalAttestation is a policy whose SKU does not say: a boot that
// presents an attestation must pass it, and a first one is trusted on
// first use without EK roots.
type optionalAttestation struct{}

func (optionalAttestation) ImageUKI() *imagereport.UKI                         { return nil }
func (optionalAttestation) Required(context.Context, store.Node) (bool, error) { return false, nil }

// nodeRun makes the node (once) and an active run of it, claimed by st's
// instance, and issues the run's boot token.
func nodeRun(t *testing.T, st *store.Store, runID string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := st.GetNode(ctx, attestNodeID); errors.Is(err, store.ErrNotFound) {
		if err := st.UpsertNode(ctx, store.Node{ID: attestNodeID, BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: attestSKUName,
			MACs: []string{attestMAC}, SystemSerial: attestSerial}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateRun(ctx, store.Run{ID: runID, NodeID: attestNodeID, Mode: "provision", Manifest: attestSKUName, Status: curev1.RunStatus_RUN_RUNNING,
		StartedAt: time.Now().UTC(), Phase: "wait_for_cure"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.ClaimRun(ctx, runID); err != nil || !ok {
		t.Fatalf("claim %s: %v %v", runID, ok, err)
	}
	token := "token-of-" + runID + strings.Repeat("t", 32)
	if err := st.IssueBootToken(ctx, store.BootToken{Hash: store.TokenHash(token), NodeID: attestNodeID, RunID: runID, Window: runID + "/1",
		Expires: time.Now().Add(10 * time.Minute)}, 0); err != nil {
		t.Fatal(err)
	}
	return token
}

// hello opens a session and says Hello with the attestation; the stream
// stays open until the test ends.
func hello(t *testing.T, c curev1.RunnerServiceClient, token, bootID string, a *curev1.Attestation) (curev1.RunnerService_SessionClient, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}
	err = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{
		Token: token, BootId: bootID, SessionSecret: "secret-of-" + bootID + strings.Repeat("s", 32),
		Identity:    &curev1.Identity{BootMac: attestMAC, SystemSerial: attestSerial},
		Inventory:   &curev1.Inventory{System: &curev1.SystemInfo{BiosVersion: "1.0"}},
		Attestation: a,
	}}})
	return stream, err
}

// bootVerdict waits for the boot's recorded attestation and reports
// whether its session was admitted (attached to the node's hub).
func bootVerdict(t *testing.T, c *attestCoord, runID, bootID string) (store.BootAttestation, bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ba, err := c.st.GetBootAttestation(ctx, runID, bootID)
		if err == nil {
			// The session is attached (or kept apart) right after the
			// verdict and the firmware measurements are written.
			for settle := time.Now().Add(time.Second); time.Now().Before(settle); time.Sleep(20 * time.Millisecond) {
				if s := c.hub.Current(attestNodeID); s != nil && s.RunID == runID {
					return ba, true
				}
			}
			return ba, false
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attestation recorded for boot %s of run %s: %v", bootID, runID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endRun ends a run, so the node can have the next.
func endRun(t *testing.T, st *store.Store, runID string) {
	t.Helper()
	r, err := st.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().UTC()
	if err := st.UpdateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func openPG(t *testing.T, dsn, instance string) *store.Store {
	t.Helper()
	st, err := store.OpenDSN(dsn, store.WithStateKey(bytes.Repeat([]byte{7}, 32)), store.WithInstance(instance), store.WithLeaseTTL(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAttestationSurvivesFailover: two coordinator instances on one
// PostgreSQL database. A runner gets its challenge from instance a, which
// then dies; the runner's Hello reaches instance b, which took the run
// over: b judges the answer against the challenge a issued (kept in the
// store), the boot is attested and admitted. A challenge is spent once:
// of two instances taking the same one, exactly one gets it.
func TestAttestationSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and swtpm")
	}
	dsn := pgtest.Start(t).NewDatabase(t)
	stA, stB := openPG(t, dsn, "a"), openPG(t, dsn, "b")
	defer stB.Close()
	pkiDir := t.TempDir() // the instances share the CA, as a fleet does
	a := startAttestCoord(t, stA, pkiDir, "a", nil, nil)
	b := startAttestCoord(t, stB, pkiDir, "b", nil, nil)
	ctx := context.Background()
	token := nodeRun(t, stA, "run-ha")
	node := newAttestTPM(t)
	node.boot("platform firmware")
	node.pin(t, stA) // the SKU requires attestation: no first use without a pin or EK roots

	// Exactly one of two instances spends a challenge.
	spare := node.attest(ctx, a.runner(), token, "boot-spare")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*store.Store{stA, stB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.TakeAttestChallenge(ctx, spare.GetChallengeId(), []string{"a", "b"}[i], time.Now())
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("both or neither instance took the challenge: %v / %v", errs[0], errs[1])
	}
	if used := errs[0]; used == nil {
		used = errs[1]
		if !errors.Is(used, store.ErrChallengeUsed) {
			t.Fatalf("the loser's error: %v, want ErrChallengeUsed", used)
		}
	}

	// The runner's challenge from a; a dies before the Hello.
	answer := node.attest(ctx, a.runner(), token, "boot1")
	a.stop()
	if err := stA.Close(); err != nil {
		t.Fatal(err)
	}
	// b takes the run over once a's lease expired, as its engine does.
	deadline := time.Now().Add(20 * time.Second)
	for {
		runs, err := stB.ClaimExpired(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("instance b never took the run over")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := hello(t, b.runner(), token, "boot1", answer); err != nil {
		t.Fatal(err)
	}
	ba, admitted := bootVerdict(t, b, "run-ha", "boot1")
	if ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("after failover: attestation %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
	}
	if ek, err := stB.NodeEK(ctx, attestNodeID); err != nil || ek.SHA256 != ba.EKSHA256 {
		t.Fatalf("EK after the attested boot: %+v %v", ek, err)
	}
}

// ekCA is a test TPM manufacturer: a root, and EK certificates it signs.
type ekCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newEKCA(t *testing.T, name string) *ekCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ekCA{cert: cert, key: key}
}

// intermediate is a CA that ca certifies (a manufacturer's issuing CA).
func (ca *ekCA) intermediate(t *testing.T, name string) *ekCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ekCA{cert: cert, key: key}
}

// rootsDir writes the CA's root as PEM into a fresh directory (--ek-roots).
func (ca *ekCA) rootsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manufacturer.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ekCert certifies pub as an EK (TCG EK certificate purpose, empty
// subject with the TPM named in a critical SAN, as real ones are shaped).
func (ca *ekCA) ekCert(t *testing.T, pub any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageKeyAgreement, UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}}, DNSNames: []string{"tpm.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// writeEKCert stores der in the TPM's NV where the TCG EK credential
// profile puts an ECC P-256 EK's certificate (0x01c0000a), as a TPM
// manufacturer does: platform-created, readable with empty auth.
func (n *attestTPM) writeEKCert(der []byte) {
	n.t.Helper()
	tp := n.sw.Open()
	idx := tpm2.TPMHandle(0x01c0000a)
	if _, err := (tpm2.NVReadPublic{NVIndex: idx}).Execute(tp); err == nil {
		if _, err := (tpm2.NVUndefineSpace{AuthHandle: tpm2.TPMRHPlatform, NVIndex: tpm2.NamedHandle{Handle: idx, Name: nvName(n.t, tp, idx)}}).Execute(tp); err != nil {
			n.t.Fatalf("undefine EK cert index: %v", err)
		}
	}
	_, err := tpm2.NVDefineSpace{AuthHandle: tpm2.TPMRHPlatform, PublicInfo: tpm2.New2B(tpm2.TPMSNVPublic{NVIndex: idx, NameAlg: tpm2.TPMAlgSHA256,
		Attributes: tpm2.TPMANV{PPWrite: true, PPRead: true, OwnerRead: true, AuthRead: true, PlatformCreate: true, NoDA: true, NT: tpm2.TPMNTOrdinary},
		DataSize:   uint16(len(der))})}.Execute(tp)
	if err != nil {
		n.t.Fatalf("define EK cert index: %v", err)
	}
	name := nvName(n.t, tp, idx)
	for off := 0; off < len(der); off += 512 {
		chunk := der[off:min(off+512, len(der))]
		if _, err := (tpm2.NVWrite{AuthHandle: tpm2.TPMRHPlatform, NVIndex: tpm2.NamedHandle{Handle: idx, Name: name},
			Data: tpm2.TPM2BMaxNVBuffer{Buffer: chunk}, Offset: uint16(off)}).Execute(tp); err != nil {
			n.t.Fatalf("write EK cert: %v", err)
		}
	}
}

func nvName(t *testing.T, tp transport.TPM, idx tpm2.TPMHandle) tpm2.TPM2BName {
	t.Helper()
	rsp, err := tpm2.NVReadPublic{NVIndex: idx}.Execute(tp)
	if err != nil {
		t.Fatal(err)
	}
	return rsp.NVName
}

// attestedBoot is one boot of node in a new run runID: measure makes its
// event log, the runner attests and says Hello, and the run ends; it
// returns the boot's attestation and whether the boot was admitted.
func attestedBoot(t *testing.T, ctx context.Context, c *attestCoord, st *store.Store, node *attestTPM, runID string, measure func()) (store.BootAttestation, bool) {
	t.Helper()
	token := nodeRun(t, st, runID)
	measure()
	if _, err := hello(t, c.runner(), token, "boot-"+runID, node.attest(ctx, c.runner(), token, "boot-"+runID)); err != nil {
		t.Fatal(err)
	}
	ba, admitted := bootVerdict(t, c, runID, "boot-"+runID)
	endRun(t, st, runID)
	return ba, admitted
}

func ekKey(t *testing.T, ekPub []byte) any {
	t.Helper()
	ek, err := attest.PublicKey(ekPub)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tpm2.Pub(*ek)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestEKCertificateVerified: with --ek-roots, an unpinned node's EK must
// come with a certificate chaining to one of the roots and certifying that
// very EK. The TPM's certificate (in its NV) from a test manufacturer is
// accepted with that manufacturer's root; refused (ek_untrusted, naming
// why) with another manufacturer's roots only, or when it certifies
// another key; a pinned EK needs no chain; without --ek-roots the EK is
// trusted on first use.
func TestEKCertificateVerified(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	maker, other := newEKCA(t, "Test TPM Manufacturer Root"), newEKCA(t, "Another Manufacturer Root")
	node := newAttestTPM(t)
	node.boot("platform firmware")
	ekPub := node.ekPublic()
	node.writeEKCert(maker.ekCert(t, ekKey(t, ekPub)))
	fp, err := attest.EKFingerprint(ekPub)
	if err != nil {
		t.Fatal(err)
	}
	// Each case is a fresh coordinator (store) booting the node once.
	boot := func(t *testing.T, roots string, pin bool, policy ...server.AttestPolicy) (store.BootAttestation, bool, *attestCoord) {
		t.Helper()
		st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		var r *attestation.EKRoots
		if roots != "" {
			if r, err = attestation.LoadEKRoots(roots); err != nil {
				t.Fatal(err)
			}
		}
		c := startAttestCoord(t, st, t.TempDir(), "", func(rs *server.RunnerService) {
			rs.EKRoots = r
			if len(policy) > 0 {
				rs.Attestation = policy[0]
			}
		}, nil)
		token := nodeRun(t, st, "run-ek")
		if pin {
			if err := st.PinEK(ctx, attestNodeID, fp, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		node.boot("platform firmware")
		if _, err := hello(t, c.runner(), token, "boot1", node.attest(ctx, c.runner(), token, "boot1")); err != nil {
			t.Fatal(err)
		}
		ba, admitted := bootVerdict(t, c, "run-ek", "boot1")
		return ba, admitted, c
	}
	untrusted := func(t *testing.T, c *attestCoord) []store.AuditEntry {
		es, err := c.st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []store.AuditEntry
		for _, e := range es {
			if e.Action == audit.EKUntrusted {
				out = append(out, e)
			}
		}
		return out
	}

	t.Run("chains to the manufacturer's root", func(t *testing.T) {
		ba, admitted, c := boot(t, maker.rootsDir(t), false)
		if ba.Status != store.AttestPassed || !admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
		}
		if es := untrusted(t, c); len(es) != 0 {
			t.Fatalf("ek_untrusted for a certified EK: %+v", es)
		}
	})
	t.Run("roots without its manufacturer", func(t *testing.T) {
		ba, admitted, c := boot(t, other.rootsDir(t), false)
		if ba.Status != store.AttestFailed || admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want failed and kept apart", ba.Status, ba.Detail, admitted)
		}
		es := untrusted(t, c)
		if len(es) != 1 || !strings.Contains(es[0].Detail, "does not chain") || !strings.Contains(es[0].Detail, fp) {
			t.Fatalf("ek_untrusted events %+v: want one naming the EK and that its certificate does not chain", es)
		}
		if _, err := c.st.NodeEK(ctx, attestNodeID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an untrusted EK was enrolled: %v", err)
		}
	})
	t.Run("pinned EK needs no chain", func(t *testing.T) {
		ba, admitted, _ := boot(t, other.rootsDir(t), true)
		if ba.Status != store.AttestPassed || !admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
		}
	})
	t.Run("no roots, SKU does not require: trust on first use", func(t *testing.T) {
		ba, admitted, c := boot(t, "", false, optionalAttestation{})
		if ba.Status != store.AttestPassed || !admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
		}
		if ek, err := c.st.NodeEK(ctx, attestNodeID); err != nil || ek.Source != store.EKTrustOnFirstUse {
			t.Fatalf("EK: %+v %v, want enrolled on first use", ek, err)
		}
	})
	t.Run("no roots, SKU requires: configuration error", func(t *testing.T) {
		ba, admitted, c := boot(t, "", false)
		if ba.Status != store.AttestFailed || admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want failed and kept apart", ba.Status, ba.Detail, admitted)
		}
		es := untrusted(t, c)
		if len(es) != 1 || !strings.Contains(es[0].Detail, "configuration error") || !strings.Contains(es[0].Detail, "SKU "+attestSKUName) || !strings.Contains(es[0].Detail, "--ek-roots") {
			t.Fatalf("ek_untrusted events %+v: want one naming the configuration error, the SKU and --ek-roots", es)
		}
		if _, err := c.st.NodeEK(ctx, attestNodeID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an EK was trusted on first use on a SKU that requires attestation: %v", err)
		}
	})
	t.Run("chains through the intermediate in the TPM's NV", func(t *testing.T) {
		// The manufacturer issues EK certificates from an intermediate
		// it leaves in the TPM's EK chain range: the runner sends it
		// (ek_chain), the roots hold only the manufacturer's root.
		issuing := maker.intermediate(t, "Test TPM Manufacturer Issuing CA")
		node.writeEKCert(issuing.ekCert(t, ekKey(t, ekPub)))
		defer node.writeEKCert(maker.ekCert(t, ekKey(t, ekPub)))
		if ba, admitted, _ := boot(t, maker.rootsDir(t), false); ba.Status != store.AttestFailed || admitted || !strings.Contains(ba.Detail, "does not chain") {
			t.Fatalf("without the intermediate: %s (%s), admitted %t; want failed, not chaining", ba.Status, ba.Detail, admitted)
		}
		if err := attest.WriteEKChain(node.sw.Open(), issuing.cert.Raw); err != nil {
			t.Fatal(err)
		}
		ba, admitted, c := boot(t, maker.rootsDir(t), false)
		if ba.Status != store.AttestPassed || !admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
		}
		if es := untrusted(t, c); len(es) != 0 {
			t.Fatalf("ek_untrusted for an EK certified through its intermediate: %+v", es)
		}
	})
	t.Run("certificate of another key", func(t *testing.T) {
		stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		node.writeEKCert(maker.ekCert(t, &stranger.PublicKey))
		defer node.writeEKCert(maker.ekCert(t, ekKey(t, ekPub)))
		ba, admitted, c := boot(t, maker.rootsDir(t), false)
		if ba.Status != store.AttestFailed || admitted {
			t.Fatalf("attestation %s (%s), admitted %t; want failed and kept apart", ba.Status, ba.Detail, admitted)
		}
		if es := untrusted(t, c); len(es) != 1 || !strings.Contains(es[0].Detail, "certifies another key") {
			t.Fatalf("ek_untrusted events %+v: want one saying the certificate certifies another key", es)
		}
	})
}

// TestMeasurementDriftQuarantines: a firmware measurement changed outside
// the pipeline holds the node: the drifting boot and every later one is
// kept out of service (not admitted: no work, no secrets), the hold is in
// the store and the drift hook quarantines the node in the pool; an
// operator cannot end it, an admin's accept-measurements does (audited
// with its reason), adopting the drifted values, the pool reconsiders the
// node (in service: its SKU has no admission policy), and the next boot is
// admitted.
func TestMeasurementDriftQuarantines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type call struct{ node, run, actor, detail string }
	var mu sync.Mutex
	var drifts, accepts []call
	// The hooks wired to the pool as provisioner-lite wires them.
	nodePool := pool.New(pool.Config{Store: st})
	c := startAttestCoord(t, st, t.TempDir(), "",
		func(rs *server.RunnerService) {
			rs.OnMeasurementDrift = func(ctx context.Context, node, run, detail string) {
				mu.Lock()
				drifts = append(drifts, call{node: node, run: run, detail: detail})
				mu.Unlock()
				if err := nodePool.Quarantine(ctx, node, run, "firmware measurement drift: "+detail); err != nil {
					t.Errorf("quarantine: %v", err)
				}
			}
		},
		func(o *server.OperatorService) {
			o.OnMeasurementsAccepted = func(ctx context.Context, node, actor, reason string) {
				mu.Lock()
				accepts = append(accepts, call{node: node, actor: actor, detail: reason})
				mu.Unlock()
				if err := nodePool.Reconsider(ctx, node, actor, "firmware measurements accepted: "+reason); err != nil {
					t.Errorf("reconsider: %v", err)
				}
			}
		})
	poolState := func() string {
		t.Helper()
		np, err := st.NodePool(ctx, attestNodeID)
		if err != nil {
			t.Fatalf("pool state: %v", err)
		}
		return np.State
	}
	node := newAttestTPM(t)
	node.pin(t, st)
	bootRun := func(runID, fw string) (store.BootAttestation, bool) {
		t.Helper()
		return attestedBoot(t, ctx, c, st, node, runID, func() { node.boot(fw) })
	}

	if ba, admitted := bootRun("run1", "platform firmware"); ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("first boot: %s (%s), admitted %t", ba.Status, ba.Detail, admitted)
	}
	rec1, err := st.GetFirmwareRecord(ctx, attestNodeID)
	if err != nil || rec1.Held() || rec1.RunID != "run1" {
		t.Fatalf("record after the first boot: %+v %v", rec1, err)
	}

	// Firmware changed by hand: the pipeline noted no change.
	ba, admitted := bootRun("run2", "platform firmware, patched")
	if ba.Status != store.AttestPassed || admitted {
		t.Fatalf("drifted boot: %s, admitted %t; want attested (the quote is genuine) and not admitted", ba.Status, admitted)
	}
	rec2, err := st.GetFirmwareRecord(ctx, attestNodeID)
	if err != nil || !rec2.Held() || rec2.Hold.RunID != "run2" || !strings.Contains(rec2.Hold.Detail, "PCR 0") ||
		rec2.Hold.PCRs["0"] == rec1.PCRs["0"] || rec2.PCRs["0"] != rec1.PCRs["0"] {
		t.Fatalf("record after the drift: %+v %v; want held by run2 naming PCR 0, the recorded values kept", rec2, err)
	}
	mu.Lock()
	if len(drifts) != 1 || drifts[0].node != attestNodeID || drifts[0].run != "run2" || !strings.Contains(drifts[0].detail, "PCR 0") {
		t.Errorf("drift hook calls %+v, want one for run2 naming PCR 0", drifts)
	}
	mu.Unlock()

	if got := poolState(); got != string(pool.Quarantined) {
		t.Fatalf("pool state after the drift: %s, want quarantined", got)
	}

	// Held: a later boot is kept apart too, even with the old firmware.
	if ba, admitted := bootRun("run3", "platform firmware"); ba.Status != store.AttestPassed || admitted {
		t.Fatalf("boot of a held node: %s, admitted %t; want not admitted", ba.Status, admitted)
	}

	// An operator may not accept; an admin must give a reason.
	if _, err := c.operator("olga", pki.RoleOperator).AcceptMeasurements(ctx, &curev1.AcceptMeasurementsRequest{NodeId: attestNodeID, Reason: "looks fine"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator role: %v, want PermissionDenied", err)
	}
	admin := c.operator("ada", pki.RoleAdmin)
	if _, err := admin.AcceptMeasurements(ctx, &curev1.AcceptMeasurementsRequest{NodeId: attestNodeID}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no reason: %v, want InvalidArgument", err)
	}
	if rec, _ := st.GetFirmwareRecord(ctx, attestNodeID); !rec.Held() {
		t.Fatal("the hold ended without an admin's accept")
	}
	resp, err := admin.AcceptMeasurements(ctx, &curev1.AcceptMeasurementsRequest{NodeId: attestNodeID, Reason: "BIOS patched by hand, ticket OPS-7"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetHeldByRun() != "run2" || resp.GetPcrs()["0"] != rec2.Hold.PCRs["0"] || resp.GetPreviousRun() != "run1" {
		t.Fatalf("accept answer %+v", resp)
	}
	rec4, err := st.GetFirmwareRecord(ctx, attestNodeID)
	if err != nil || rec4.Held() || rec4.PCRs["0"] != rec2.Hold.PCRs["0"] || rec4.RunID != "run2" {
		t.Fatalf("record after the accept: %+v %v; want the drifted values adopted, no hold", rec4, err)
	}
	mu.Lock()
	if len(accepts) != 1 || accepts[0].node != attestNodeID || accepts[0].actor != "ada" || accepts[0].detail != "BIOS patched by hand, ticket OPS-7" {
		t.Errorf("accept hook calls %+v", accepts)
	}
	mu.Unlock()
	// The SKU has no admission policy: released from quarantine, the node
	// is out of the pool until an operator returns it (its drifted run
	// failed: nothing says it belongs in service).
	if got := poolState(); got != string(pool.None) {
		t.Fatalf("pool state after the accept: %q, want out of the pool", got)
	}
	ops, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditOperator, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	audited := false
	for _, e := range ops {
		if e.Action == curev1.OperatorService_AcceptMeasurements_FullMethodName && e.Actor == "ada" && e.Result == codes.OK.String() &&
			strings.Contains(e.Detail, "ticket OPS-7") && strings.Contains(e.Detail, "held_by_run=run2") && len(e.Nodes) == 1 && e.Nodes[0] == attestNodeID {
			audited = true
		}
	}
	if !audited {
		t.Fatalf("no audit entry of ada's accept with its reason and the hold: %+v", ops)
	}
	// Accepted again: nothing held.
	if _, err := admin.AcceptMeasurements(ctx, &curev1.AcceptMeasurementsRequest{NodeId: attestNodeID, Reason: "again"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second accept: %v, want FailedPrecondition", err)
	}

	// The patched firmware is now the node's: its boot is admitted.
	if ba, admitted := bootRun("run4", "platform firmware, patched"); ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("boot after the accept: %s (%s), admitted %t", ba.Status, ba.Detail, admitted)
	}
}
