package admission

import (
	"errors"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// TestEvaluateTable: each requirement's states, and the decision they make.
func TestEvaluateTable(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	policy := func(boot, att, band string) *manifests.Admission {
		return &manifests.Admission{Boot: boot, Attestation: att, FleetBand: band,
			Acceptance: &manifests.Acceptance{Suite: "burnin-24h-hgx", Mode: "burnin", MaxAge: manifests.Duration(7 * 24 * time.Hour)}}
	}
	strict := policy(manifests.BootHTTPS, manifests.AdmitAttested, manifests.FleetBandRequired)
	good := func() Evidence {
		return Evidence{Now: now,
			Provision:    &Run{ID: "p", Mode: "provision", Status: curev1.RunStatus_RUN_SUCCEEDED, EndedAt: now.Add(-30 * time.Hour), BootPath: runstate.BootPathHTTPS},
			Acceptance:   &Run{ID: "a", Mode: "burnin", Status: curev1.RunStatus_RUN_SUCCEEDED, StartedAt: now.Add(-25 * time.Hour), EndedAt: now.Add(-time.Hour), BootPath: runstate.BootPathHTTPS},
			Verdicts:     []Verdict{{Component: "gpu/0", Check: "gpu-burn", Status: curev1.VerdictStatus_PASS}},
			Attestations: []Attestation{{BootID: "b1", Status: "passed", EKSHA256: "ek"}},
			Fleet:        Fleet{Bands: true, Judged: true}}
	}
	cases := []struct {
		name   string
		p      *manifests.Admission
		edit   func(*Evidence)
		want   Decision
		req    string
		state  State
		detail string
	}{
		{"all met", strict, func(*Evidence) {}, Admit, ReqAcceptance, Met, "passed"},
		{"no provision", strict, func(e *Evidence) { e.Provision, e.Acceptance = nil, nil }, Wait, ReqProvisioned, Pending, "no provision run"},
		{"provision failed", strict, func(e *Evidence) { e.Provision.Status = curev1.RunStatus_RUN_FAILED }, Refuse, ReqProvisioned, Failed, "failed"},
		{"pxe where https asked", strict, func(e *Evidence) { e.Acceptance.BootPath = runstate.BootPathPXE }, Refuse, ReqBootPath, Failed, "must be uefi-https"},
		{"pxe accepted", policy(manifests.BootPXE, manifests.AdmitUnattested, manifests.FleetBandRequired), func(e *Evidence) { e.Acceptance.BootPath = runstate.BootPathPXE }, Admit, ReqBootPath, Met, "pxe"},
		{"no recorded boot path", policy(manifests.BootPXE, manifests.AdmitUnattested, manifests.FleetBandRequired), func(e *Evidence) { e.Provision.BootPath = "" }, Refuse, ReqBootPath, Failed, "no recorded path"},
		{"acceptance under way", strict, func(e *Evidence) {
			e.Acceptance.Status, e.Acceptance.BootPath, e.Attestations, e.Verdicts = curev1.RunStatus_RUN_RUNNING, "", nil, nil
		}, Wait, ReqAcceptance, Pending, "under way"},
		{"attestation failed", strict, func(e *Evidence) { e.Attestations[0].Status, e.Attestations[0].Detail = "failed", "PCR 4" }, Refuse, ReqAttestation, Failed, "PCR 4"},
		{"no attested boot", strict, func(e *Evidence) { e.Attestations = nil }, Refuse, ReqAttestation, Failed, "no attested boot"},
		{"measurement hold", strict, func(e *Evidence) { e.Hold, e.HoldRun = "PCR 0 differs", "a" }, Refuse, ReqMeasurements, Failed, "PCR 0 differs"},
		{"a FAIL verdict", strict, func(e *Evidence) {
			e.Verdicts = append(e.Verdicts, Verdict{Component: "bmc/psu/PSU2", Check: "psu", Status: curev1.VerdictStatus_FAIL})
		}, Refuse, ReqAcceptance, Failed, ""},
		{"an ERROR verdict", strict, func(e *Evidence) {
			e.Verdicts = append(e.Verdicts, Verdict{Component: "gpu/*", Check: "gpu-burn", Status: curev1.VerdictStatus_ERROR})
		}, Refuse, ReqAcceptance, Failed, ""},
		{"run failed with no verdict", strict, func(e *Evidence) { e.Acceptance.Status, e.Verdicts = curev1.RunStatus_RUN_FAILED, nil }, Refuse, ReqAcceptance, Failed, "failed"},
		{"succeeded with no verdict", strict, func(e *Evidence) { e.Verdicts = nil }, Refuse, ReqAcceptance, Failed, "proved nothing"},
		{"only optional checks, all skipped", strict, func(e *Evidence) {
			e.Verdicts = []Verdict{{Component: "ib/*", Check: "infiniband", Status: curev1.VerdictStatus_SKIP}}
		}, Refuse, ReqAcceptance, Failed, "no passing verdict"},
		{"too old", strict, func(e *Evidence) { e.Acceptance.EndedAt = now.Add(-8 * 24 * time.Hour) }, Wait, ReqAcceptance, Pending, "older than"},
		{"changed after", strict, func(e *Evidence) { e.ChangedAfter = "service run s started after it" }, Wait, ReqAcceptance, Pending, "service run s"},
		{"band not yet full, required", strict, func(e *Evidence) { e.Fleet.NotApplied = "fleet band not applied: 2 of 5 nodes" }, Wait, ReqFleetBand, Pending, "2 of 5"},
		{"band not yet full, if available", policy(manifests.BootHTTPS, manifests.AdmitAttested, manifests.FleetBandIfAvailable), func(e *Evidence) { e.Fleet.NotApplied = "2 of 5 nodes" }, Admit, ReqFleetBand, Met, "judged again"},
		{"no judgement on record", strict, func(e *Evidence) { e.Fleet.Judged = false }, Refuse, ReqFleetBand, Error, "no fleet judgement"},
		{"suite names no band", strict, func(e *Evidence) { e.Fleet = Fleet{} }, Refuse, ReqFleetBand, Failed, "names none"},
		{"evidence unreadable", strict, func(e *Evidence) { e.Errs = map[string]error{ReqAttestation: errors.New("database is locked")} }, Refuse, ReqAttestation, Error, "database is locked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := good()
			c.edit(&ev)
			res := Evaluate(c.p, ev)
			var got *Requirement
			for i := range res.Requirements {
				if res.Requirements[i].Name == c.req {
					got = &res.Requirements[i]
				}
			}
			if res.Decision != c.want || got == nil || got.State != c.state || !strings.Contains(got.Detail+" "+got.Evidence, c.detail) {
				t.Errorf("decision %s, %s = %+v; want %s, %s %s naming %q\nreasons: %s", res.Decision, c.req, got, c.want, c.req, c.state, c.detail, res.Reasons())
			}
		})
	}
}

func TestFingerprintIgnoresBootNoise(t *testing.T) {
	base := `{"system":{"serial":"S1","biosVersion":"2.19.1"},"nics":[{"mac":"52:54:00:00:00:01","addresses":["10.0.0.5/24"],"linkUp":true}],"kernel":"6.1"}`
	noise := `{"system":{"serial":"S1","biosVersion":"2.19.1"},"nics":[{"mac":"52:54:00:00:00:01","addresses":["10.0.0.9/24"],"linkUp":false}],"kernel":"6.1.2"}`
	flashed := `{"system":{"serial":"S1","biosVersion":"2.21.0"},"nics":[{"mac":"52:54:00:00:00:01"}]}`
	a, err := Fingerprint([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Fingerprint([]byte(noise))
	c, _ := Fingerprint([]byte(flashed))
	if a != b || a == c {
		t.Errorf("fingerprints: base %s, noise %s (want equal), flashed %s (want different)", a, b, c)
	}
	if _, err := Fingerprint([]byte("{")); err == nil {
		t.Error("a broken inventory fingerprinted")
	}
}
