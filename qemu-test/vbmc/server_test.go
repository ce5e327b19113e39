package vbmc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pinnedClient accepts only the certificate whose SHA-256 is pin, as the
// coordinator does for a node with bmc.fingerprint.
func pinnedClient(pin string) *http.Client {
	cfg := &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if got := "sha256:" + hex.EncodeToString(sum[:]); got != pin {
				return fmt.Errorf("certificate %s, pinned %s", got, pin)
			}
			return nil
		},
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
}

// The pin the harness writes into the inventory must still match after the
// BMC resets (its listener closes and opens again).
func TestTLSFingerprintSurvivesReset(t *testing.T) {
	cfg := oobConfig()
	cfg.ResetRefuse = true
	cfg.ResetDuration = 3 * time.Second // long enough to see the refusal on a loaded machine
	cfg.Logger = testLogger(t)
	b, err := New(cfg, NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", b, true)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	pin := srv.Fingerprint()
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(pin) || !strings.HasPrefix(srv.URL, "https://") {
		t.Fatalf("Fingerprint() = %q, URL %s; want sha256:<64 lowercase hex> over https", pin, srv.URL)
	}
	hc := pinnedClient(pin)
	get := func() error {
		resp, err := hc.Get(srv.URL + "/redfish/v1/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("pinned client before the reset: %v", err)
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	if _, err := pinnedClient("sha256:" + strings.Repeat("00", 32)).Get(srv.URL + "/redfish/v1/"); err == nil {
		t.Fatal("a wrong pin matched: the check above proves nothing")
	}
	req, _ := http.NewRequest("POST", srv.URL+managerURL+"/Actions/Manager.Reset", strings.NewReader(`{"ResetType":"ForceRestart"}`))
	req.SetBasicAuth("admin", "password")
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %v %v", resp, err)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
	waitFor(t, 5*time.Second, "BMC refusing during its reset", func() bool { return errors.Is(get(), syscall.ECONNREFUSED) })
	waitFor(t, 15*time.Second, "BMC back with the pinned certificate", func() bool { return get() == nil })
	if srv.Fingerprint() != pin {
		t.Fatalf("Fingerprint changed across the reset: %s -> %s", pin, srv.Fingerprint())
	}

	// Plain HTTP has nothing to pin.
	b2, err := New(Config{Name: "plain", Logger: testLogger(t)}, NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Listen("127.0.0.1:0", b2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown(context.Background())
	if plain.Fingerprint() != "" {
		t.Fatalf("plain HTTP server has a fingerprint %q", plain.Fingerprint())
	}
}
