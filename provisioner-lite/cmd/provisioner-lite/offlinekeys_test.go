package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
)

// offlineSite is a site whose Secure Boot and boot CA keys were made on a
// key host (`pki offline`) and whose state dir holds only what that
// command exported: the certificates and the listener's certificate and key.
type offlineSite struct {
	*site
	keys string
}

func newOfflineSite(t *testing.T) *offlineSite {
	t.Helper()
	s := &offlineSite{site: newSite(t), keys: filepath.Join(t.TempDir(), "keyhost")}
	for _, f := range []string{pki.SecureBootKeyFile, pki.SecureBootCertFile, pki.BootCAKeyFile, pki.BootCACertFile, pki.BootCAESLFile} {
		if err := os.Remove(filepath.Join(s.pkiDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	s.export(t, s.keys, "127.0.0.1", pki.ListenerValidity, time.Now(), "")
	return s
}

// export runs `pki offline` on keys and copies what it wrote into the
// site's pki dir, less the file named by drop.
func (s *offlineSite) export(t *testing.T, keys, host string, validity time.Duration, now time.Time, drop string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export")
	res, err := pki.OfflineExport(keys, out, []string{host}, validity, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		if filepath.Base(f) == drop {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.pkiDir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The coordinator starts and serves verified HTTPS boot from a state dir
// with no Secure Boot key and no boot CA key: a TLS client trusting only
// boot-ca.pem, offering what EDK2 offers, gets the offline-issued
// boot-tls.pem; no key is made in their place. A listener certificate from
// another CA, expired, not covering --advertise, without its key, or none
// beside a boot CA without its key stops the start, naming the file.
func TestOfflineKeysCoordinatorStarts(t *testing.T) {
	s := newOfflineSite(t)
	c := s.start("--https-listen", "127.0.0.1:0")
	b, _ := os.ReadFile(s.coordLog)
	m := regexp.MustCompile(`msg="HTTPS boot listener" addr=(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no HTTPS boot listener in the log:\n%s", b)
	}
	caPEM, _ := os.ReadFile(filepath.Join(s.pkiDir, pki.BootCACertFile))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", string(m[1]), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}})
	if err != nil {
		t.Fatalf("a client trusting only the boot CA: %v", err)
	}
	served := conn.ConnectionState().PeerCertificates[0].Raw
	conn.Close()
	listenerPEM, _ := os.ReadFile(filepath.Join(s.pkiDir, pki.BootTLSCertFile))
	if blk, _ := pem.Decode(listenerPEM); blk == nil || !bytes.Equal(blk.Bytes, served) {
		t.Error("the HTTPS boot listener does not serve the offline-issued boot-tls.pem")
	}
	c.stop(t)
	for _, f := range []string{pki.SecureBootKeyFile, pki.BootCAKeyFile} {
		if _, err := os.Stat(filepath.Join(s.pkiDir, f)); err == nil {
			t.Errorf("the coordinator made %s where the key is kept offline", f)
		}
	}

	listener := filepath.Join(s.pkiDir, pki.BootTLSCertFile)
	other := filepath.Join(t.TempDir(), "other-keyhost")
	for _, tc := range []struct {
		name    string
		prepare func()
		want    []string
	}{
		{"another CA", func() { s.exportListener(t, other, "127.0.0.1", pki.ListenerValidity, time.Now()) },
			[]string{listener, "does not chain to the boot CA"}},
		{"expired", func() {
			s.exportListener(t, s.keys, "127.0.0.1", pki.ListenerValidity, time.Now().Add(-100*24*time.Hour))
		},
			[]string{listener, "expired"}},
		{"another host", func() { s.exportListener(t, s.keys, "10.9.9.9", pki.ListenerValidity, time.Now()) },
			[]string{listener, "does not cover 127.0.0.1"}},
		{"certificate without its key", func() {
			s.exportListener(t, s.keys, "127.0.0.1", pki.ListenerValidity, time.Now())
			os.Remove(filepath.Join(s.pkiDir, pki.BootTLSKeyFile))
		}, []string{listener, "has no key", pki.BootTLSKeyFile}},
		{"boot CA without its key, no listener", func() {
			os.Remove(filepath.Join(s.pkiDir, pki.BootTLSKeyFile))
			os.Remove(listener)
		}, []string{filepath.Join(s.pkiDir, pki.BootCACertFile), pki.BootCAKeyFile, "no listener certificate"}},
	} {
		tc.prepare()
		err := runUntilRefused(t, s.state)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, w)
			}
		}
		for _, f := range []string{pki.SecureBootKeyFile, pki.BootCAKeyFile} {
			if _, err := os.Stat(filepath.Join(s.pkiDir, f)); err == nil {
				t.Fatalf("%s: the coordinator made %s", tc.name, f)
			}
		}
	}
}

// An offline-issued listener certificate that expires within 30 days is
// served, with a warning naming it.
func TestOfflineListenerExpiryWarned(t *testing.T) {
	s := newOfflineSite(t)
	s.exportListener(t, s.keys, "127.0.0.1", 10*24*time.Hour, time.Now())
	logs := &syncBuf{}
	cfg := testConfig(s.state)
	cfg.HTTPSListen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, slog.New(slog.NewTextHandler(logs, nil)), cfg) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "provisioner-lite ready") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the coordinator stopped: %v\n%s", err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", logs.String())
		}
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "expires soon") || !strings.Contains(out, filepath.Join(s.pkiDir, pki.BootTLSCertFile)) {
		t.Errorf("no warning naming the listener certificate that expires in 10 days:\n%s", out)
	}
}

// exportListener puts a listener certificate and key issued by keys' boot
// CA into the site's pki dir, keeping the site's boot CA and Secure Boot
// certificates.
func (s *offlineSite) exportListener(t *testing.T, keys, host string, validity time.Duration, now time.Time) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export")
	if _, err := pki.OfflineExport(keys, out, []string{host}, validity, now); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{pki.BootTLSCertFile, pki.BootTLSKeyFile} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.pkiDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// runUntilRefused runs the coordinator in-process on state with an HTTPS
// boot listener and returns its error; one still running after 30 s was
// not refused (nil).
func runUntilRefused(t *testing.T, state string) error {
	t.Helper()
	cfg := testConfig(state)
	cfg.HTTPSListen = "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, slog.New(slog.DiscardHandler), cfg)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// init on a state dir given the key host's export keeps its certificates,
// makes no key beside them, and says the image is signed elsewhere.
func TestInitKeepsOfflineCertificates(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	if _, err := pki.OfflineExport(filepath.Join(root, "keyhost"), filepath.Join(state, "pki"), []string{"10.0.0.5"}, pki.ListenerValidity, time.Now()); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(state, "pki", pki.BootCACertFile))
	r, err := initState(state, "ada", "10.0.0.5", "", "/proc", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{pki.SecureBootKeyFile, pki.BootCAKeyFile} {
		if _, err := os.Stat(filepath.Join(state, "pki", f)); err == nil {
			t.Errorf("init made %s beside a certificate without one", f)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(state, "pki", pki.BootCACertFile)); !bytes.Equal(before, after) {
		t.Error("init replaced the offline boot CA")
	}
	var out bytes.Buffer
	r.print(&out)
	if !r.secureBootOffline || !strings.Contains(out.String(), "Secure Boot key is kept offline") {
		t.Errorf("init does not say the Secure Boot key is offline:\n%s", out.String())
	}
}
