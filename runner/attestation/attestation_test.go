package attestation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
)

type noCoordinator struct{ called bool }

func (n *noCoordinator) BeginAttestation(context.Context, *curev1.AttestBegin, ...grpc.CallOption) (*curev1.AttestChallenge, error) {
	n.called = true
	return nil, nil
}

// A node without a TPM still says Hello: its attestation names why it has
// none, and the coordinator is not asked for a challenge.
func TestNoTPM(t *testing.T) {
	root := t.TempDir()
	c := &noCoordinator{}
	a := Attest(context.Background(), Device(root), c, "tok", "boot")
	if a.GetError() == "" || !strings.Contains(a.GetError(), "no TPM") || a.GetChallengeId() != "" || c.called {
		t.Fatalf("attestation without a TPM: %v (coordinator asked: %t)", a, c.called)
	}
}

// The event log is read from securityfs under the root, bounded.
func TestEventLogRead(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sys/kernel/security/tpm0/binary_bios_measurements")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Device(root).EventLog()
	if err != nil || string(b) != "log" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := readBounded(p, 2); err == nil {
		t.Fatal("a log over the bound was read")
	}
}
