package fleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// stats collects what the simulated runners observe.
type stats struct {
	mu      sync.Mutex
	acks    []time.Duration
	flashes int
}

func newStats() *stats { return &stats{} }

// ack records one event's emit-to-ack latency (the event's own timestamp is
// when the agent emitted it).
func (s *stats) ack(ev *curev1.Event) {
	if ev.GetTimeUnixMs() == 0 {
		return
	}
	d := time.Since(time.UnixMilli(ev.GetTimeUnixMs()))
	s.mu.Lock()
	s.acks = append(s.acks, d)
	s.mu.Unlock()
}

func (s *stats) flash() {
	s.mu.Lock()
	s.flashes++
	s.mu.Unlock()
}

func (s *stats) ackPercentiles() (p50, p99 time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return percentile(s.acks, 50), percentile(s.acks, 99)
}

// selfSigned is the BMCs' certificate; the inventory pins its fingerprint.
func selfSigned() (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "fleet-sim BMC"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	sum := sha256.Sum256(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, "sha256:" + hex.EncodeToString(sum[:]), nil
}
