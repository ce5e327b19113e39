package manifests

import "cmp"

// Admission is what a node of a SKU must show before the pool puts it in
// service (spec.admission; docs/VALIDATION.md, "Admission"). A SKU without
// it admits a node the moment its provision succeeds.
type Admission struct {
	// Boot is the boot path into CURE the node's provision and acceptance
	// runs must have taken: BootHTTPS (the signed image over verified
	// HTTPS) or BootPXE (either path: a site that accepts PXE).
	Boot string `yaml:"boot"`
	// Attestation is AdmitAttested: the acceptance run's boots attested,
	// with firmware measurements equal to the node's accepted ones (no
	// measurement hold); or AdmitUnattested.
	Attestation string `yaml:"attestation"`
	// Acceptance is the suite run a node must pass (required).
	Acceptance *Acceptance `yaml:"acceptance,omitempty"`
	// FleetBand is FleetBandRequired: the acceptance run must have been
	// judged against its SKU's fleet band (a day-0 node waits in accepting
	// until the band has its minimum of nodes); or FleetBandIfAvailable:
	// a run judged on its absolute bars alone is admitted, and judged
	// again when the band fills.
	FleetBand string `yaml:"fleetBand"`
}

// Acceptance names the suite a node must pass, how it runs and how
// recent its pass must be.
type Acceptance struct {
	Suite string `yaml:"suite"`
	// Mode is "burnin" (the default) or "diagnostic".
	Mode string `yaml:"mode"`
	// MaxAge is how long a pass counts (default DefaultAcceptanceMaxAge):
	// an older one, or one followed by a firmware or hardware change, is
	// run again.
	MaxAge Duration `yaml:"maxAge,omitempty"`
}

// Admission values.
const (
	BootHTTPS = "uefi-https"
	BootPXE   = "pxe"

	AdmitAttested   = "required"
	AdmitUnattested = "none"

	FleetBandRequired    = "required"
	FleetBandIfAvailable = "ifAvailable"
)

// DefaultAcceptanceMaxAge is how long an acceptance pass counts when the
// SKU does not say: a week, the longest burn-in's period in the examples.
const DefaultAcceptanceMaxAge = Duration(7 * 24 * 60 * 60 * 1e9)

func (d *decoder) admission(f *fields, p string, attestation string) *Admission {
	v := f.get("admission")
	if v == nil {
		return nil
	}
	a := d.mapping(v, p, "boot", "attestation", "acceptance", "fleetBand")
	out := &Admission{
		Boot:        a.enum("boot", BootHTTPS, BootHTTPS, BootPXE),
		Attestation: a.enum("attestation", AdmitAttested, AdmitAttested, AdmitUnattested),
		FleetBand:   a.enum("fleetBand", FleetBandRequired, FleetBandRequired, FleetBandIfAvailable),
	}
	if out.Attestation == AdmitAttested && attestation != AttestationRequired {
		at := a.vals["attestation"]
		if at == nil {
			at = v // the default: the mapping's own line
		}
		d.errorf(at, join(p, "attestation"),
			"admission requires attestation but spec.attestation is %q: set spec.attestation: required (every boot must attest) or admission.attestation: none", cmp.Or(attestation, AttestationOptional))
	}
	if out.Attestation == AdmitAttested && out.Boot != BootHTTPS {
		d.errorf(a.vals["boot"], join(p, "boot"), "an attested admission needs the signed image's boot path (uefi-https): PCR 4 is checked against it")
	}
	if av := a.get("acceptance"); av != nil {
		ap := join(p, "acceptance")
		af := d.mapping(av, ap, "suite", "mode", "maxAge")
		acc := &Acceptance{Mode: af.enum("mode", "burnin", "burnin", "diagnostic"), MaxAge: af.duration("maxAge")}
		suite, sv := af.str("suite", true)
		acc.Suite = suite
		d.checkName(sv, join(ap, "suite"), acc.Suite)
		if acc.MaxAge == 0 {
			acc.MaxAge = DefaultAcceptanceMaxAge
		}
		out.Acceptance = acc
	} else if a.ok {
		a.missing("acceptance")
	}
	return out
}
