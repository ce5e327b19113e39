package vbmc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a BMC listening on its own address, like a real BMC's NIC.
type Server struct {
	BMC *BMC
	URL string // http(s)://host:port, the Redfish endpoint

	addr   string // the bound address, reused when the BMC comes back
	tlsCfg *tls.Config
	// fingerprint pins the certificate: the same one is served after a reset.
	fingerprint string

	mu   sync.Mutex
	srv  *http.Server // nil while the BMC is resetting (refusing)
	done bool

	open     atomic.Int64 // client connections open now
	accepted atomic.Int64 // client connections accepted in all
}

// Listen serves b on addr ("127.0.0.1:0" picks a port) in the background.
// With useTLS it serves HTTPS with a fresh self-signed certificate, as real
// BMCs do: clients pin it with Fingerprint (or skip verification).
func Listen(addr string, b *BMC, useTLS bool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("vbmc %s: listen on %s: %w", b.cfg.Name, addr, err)
	}
	scheme := "http"
	s := &Server{BMC: b, addr: ln.Addr().String()}
	if useTLS {
		cert, err := selfSigned()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("vbmc %s: %w", b.cfg.Name, err)
		}
		s.tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		sum := sha256.Sum256(cert.Certificate[0])
		s.fingerprint = "sha256:" + hex.EncodeToString(sum[:])
		scheme = "https"
	}
	s.URL = scheme + "://" + s.addr
	s.serve(ln)
	b.setReachHook(s.setReachable)
	b.log.Info("listening", "url", s.URL)
	return s, nil
}

// Fingerprint is the pin of the certificate the server presents: "sha256:"
// and the hex SHA-256 of its DER, as the node inventory's bmc.fingerprint
// takes it. It stays valid across BMC resets. Empty over plain HTTP.
func (s *Server) Fingerprint() string { return s.fingerprint }

func (s *Server) serve(ln net.Listener) {
	if s.tlsCfg != nil {
		ln = tls.NewListener(ln, s.tlsCfg)
	}
	srv := &http.Server{Handler: s.BMC.Handler(), ReadHeaderTimeout: 10 * time.Second, ConnState: s.connState}
	s.srv = srv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.BMC.log.Error("serve", "err", err)
		}
	}()
}

// connState counts the client connections open (a BMC's few TCP slots
// are what a coordinator's idle keep-alives hold).
func (s *Server) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.open.Add(1)
		s.accepted.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
	}
}

// OpenConns is the number of client connections open now.
func (s *Server) OpenConns() int { return int(s.open.Load()) }

// Accepted is the number of client connections accepted so far (each one a
// TLS handshake over https).
func (s *Server) Accepted() int { return int(s.accepted.Load()) }

// setReachable closes the listener and every connection (a rebooting BMC
// refuses connections) or listens again on the same address.
func (s *Server) setReachable(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if !up {
		if s.srv != nil {
			_ = s.srv.Close()
			s.srv = nil
		}
		s.BMC.log.Info("BMC unreachable: listener closed", "addr", s.addr)
		return
	}
	if s.srv != nil {
		return
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.BMC.log.Error("BMC cannot listen again after its reset", "addr", s.addr, "err", err)
		return
	}
	s.serve(ln)
	s.BMC.log.Info("BMC listening again", "addr", s.addr)
}

// Shutdown stops serving, then closes the BMC (which powers the machine off).
func (s *Server) Shutdown(ctx context.Context) error {
	// Close the BMC first so hung requests return and Shutdown can drain.
	err := s.BMC.Close(ctx)
	s.mu.Lock()
	s.done = true
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		if e := srv.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate BMC key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "vbmc"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-sign BMC certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
