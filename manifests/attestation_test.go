package manifests

import (
	"strings"
	"testing"
)

func TestSKUAttestation(t *testing.T) {
	const base = "apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: a\nspec:\n"
	for val, want := range map[string]string{"": "", "  attestation: required\n": AttestationRequired, "  attestation: optional\n": AttestationOptional} {
		s, err := ParseSKU("a.yaml", []byte(base+val+"  bios:\n    settings: {A: B}\n"))
		if err != nil {
			t.Fatalf("%q: %v", val, err)
		}
		if s.Spec.Attestation != want {
			t.Errorf("%q: attestation %q, want %q", val, s.Spec.Attestation, want)
		}
	}
	_, err := ParseSKU("a.yaml", []byte(base+"  attestation: maybe\n"))
	if err == nil || !strings.Contains(err.Error(), "a.yaml:6") || !strings.Contains(err.Error(), "spec.attestation") {
		t.Fatalf("bad attestation value: %v", err)
	}
}
