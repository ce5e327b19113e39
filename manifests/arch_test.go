package manifests

import (
	"strings"
	"testing"
)

func TestSKUArch(t *testing.T) {
	const head = "apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n"
	for body, want := range map[string]string{"  arch: arm64\n": ArchARM64, "  arch: amd64\n": ArchAMD64, "  attestation: optional\n": ArchAMD64} {
		sku, err := ParseSKU("x.yaml", []byte(head+body))
		if err != nil || sku.Spec.Architecture() != want {
			t.Errorf("%q: arch %q, %v; want %q", body, sku.Spec.Architecture(), err, want)
		}
	}
	_, err := ParseSKU("x.yaml", []byte(head+"  arch: aarch64\n"))
	if err == nil || !strings.Contains(err.Error(), `x.yaml:5: spec.arch: "aarch64" is not one of amd64, arm64`) {
		t.Errorf("aarch64: %v", err)
	}
}
