package manifests

import (
	"strings"
	"testing"
	"time"
)

func TestAdmissionDecoded(t *testing.T) {
	sku, err := LoadSKU("examples/hgx-b200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := sku.Spec.Admission
	if sku.Spec.Attestation != AttestationRequired || a == nil || a.Boot != BootHTTPS || a.Attestation != AdmitAttested ||
		a.FleetBand != FleetBandRequired || a.Acceptance == nil || a.Acceptance.Suite != "burnin-24h-hgx" ||
		a.Acceptance.Mode != "burnin" || time.Duration(a.Acceptance.MaxAge) != 168*time.Hour {
		t.Fatalf("HGX example admission = %+v (acceptance %+v), attestation %q", a, a.Acceptance, sku.Spec.Attestation)
	}
	qemu, err := LoadSKU("examples/qemu-nvme.yaml")
	if err != nil || qemu.Spec.Admission != nil {
		t.Fatalf("qemu-nvme: admission %+v, %v: want none (a SKU without spec.admission keeps in-service-on-provision)", qemu.Spec.Admission, err)
	}
}

func TestAdmissionDefaultsAndErrors(t *testing.T) {
	const head = "apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n"
	sku, err := ParseSKU("x.yaml", []byte(head+"  admission:\n    attestation: none\n    boot: pxe\n    acceptance: {suite: qemu-burnin}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := sku.Spec.Admission
	if a.FleetBand != FleetBandRequired || a.Acceptance.Mode != "burnin" || a.Acceptance.MaxAge != DefaultAcceptanceMaxAge {
		t.Errorf("defaults: %+v %+v", a, a.Acceptance)
	}
	for _, c := range []struct{ yaml, want string }{
		{"  admission:\n    acceptance: {suite: s}\n", `x.yaml:6: spec.admission.attestation: admission requires attestation`},
		{"  attestation: required\n  admission:\n    boot: pxe\n    acceptance: {suite: s}\n", `spec.admission.boot: an attested admission needs`},
		{"  admission:\n    attestation: none\n", `spec.admission.acceptance: required field is missing`},
		{"  admission:\n    attestation: none\n    acceptance: {suite: s, mode: audit}\n", `spec.admission.acceptance.mode: "audit" is not one of burnin, diagnostic`},
		{"  admission:\n    attestation: none\n    fleetBand: maybe\n    acceptance: {suite: s}\n", `spec.admission.fleetBand: "maybe" is not one of required, ifAvailable`},
		{"  admission:\n    attestation: none\n    acceptance: {suite: s, maxAge: 1 week}\n", `spec.admission.acceptance.maxAge`},
	} {
		_, err := ParseSKU("x.yaml", []byte(head+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want it to name %q", c.yaml, err, c.want)
		}
	}
}
