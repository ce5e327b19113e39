package store

import (
	"strings"
	"testing"
	"time"
)

func TestRunDataRoundTrip(t *testing.T) {
	var r Run // nil Data: setters allocate
	at := time.Date(2026, 11, 24, 12, 0, 0, 123456789, time.UTC)
	r.SetAttempts("bmc", 3)
	r.SetPhaseStartedAt("bmc", at)
	r.SetHostRebootedAt(at)
	r.SetHostWaitFrom(42)
	r.SetHostRebootAttempt(2)
	r.SetBMCResetAt(at)
	r.SetBMCResets(1)
	r.SetBootRequestedAt(at)
	r.SetAssignCursor(0)
	r.SetBoot(BootCURE)
	r.SetCUREWindow("w7")
	r.SetRunnerAddr("a:1,b:2")
	r.SetFreshCURE("resumed")
	r.SetOOBSubmission("bmc-fw", "submitted task /t/1")
	r.SetPhaseDeadline("validate", at)

	// The stored encoding is the one earlier coordinators wrote.
	want := map[string]string{
		"attempts/bmc": "3", "started/bmc": "2026-11-24T12:00:00.123456789Z", "host_rebooted_at": "2026-11-24T12:00:00.123456789Z",
		"host_wait_from": "42", "host_reboot_attempt": "2", "bmc_reset_at": "2026-11-24T12:00:00.123456789Z", "bmc_resets": "1",
		"boot_requested_at": "2026-11-24T12:00:00.123456789Z", "assign_cursor": "0", "boot": "cure", "cure_window": "w7",
		"runner_addr": "a:1,b:2", "fresh_cure": "resumed", "oob/bmc-fw": "submitted task /t/1",
		"deadline/validate": "2026-11-24T12:00:00.123456789Z",
	}
	for k, v := range want {
		if r.Data[k] != v {
			t.Errorf("Data[%q] = %q, want %q", k, r.Data[k], v)
		}
	}
	if len(r.Data) != len(want) {
		t.Errorf("Data has %d keys, want %d: %v", len(r.Data), len(want), r.Data)
	}
	if err := r.ValidateData(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Attempts("bmc"); n != 3 || err != nil {
		t.Errorf("Attempts = %d, %v", n, err)
	}
	if n, err := r.Attempts("nic"); n != 0 || err != nil {
		t.Errorf("Attempts of a phase never started = %d, %v", n, err)
	}
	for name, get := range map[string]func() (time.Time, error){
		"PhaseStartedAt": func() (time.Time, error) { return r.PhaseStartedAt("bmc") },
		"PhaseDeadline":  func() (time.Time, error) { return r.PhaseDeadline("validate") },
		"HostRebootedAt": r.HostRebootedAt, "BMCResetAt": r.BMCResetAt, "BootRequestedAt": r.BootRequestedAt,
	} {
		if got, err := get(); !got.Equal(at) || err != nil {
			t.Errorf("%s = %v, %v; want %v", name, got, err, at)
		}
	}
	if n, err := r.HostWaitFrom(); n != 42 || err != nil {
		t.Errorf("HostWaitFrom = %d, %v", n, err)
	}
	if n, err := r.HostRebootAttempt(); n != 2 || err != nil {
		t.Errorf("HostRebootAttempt = %d, %v", n, err)
	}
	if n, err := r.BMCResets(); n != 1 || err != nil {
		t.Errorf("BMCResets = %d, %v", n, err)
	}
	if c, ok, err := r.AssignCursor(); c != 0 || !ok || err != nil {
		t.Errorf("AssignCursor = %d, %t, %v; want 0, true (a cursor at event 0 is still outstanding)", c, ok, err)
	}
	r.ClearAssignCursor()
	if _, ok, _ := r.AssignCursor(); ok {
		t.Error("AssignCursor outstanding after ClearAssignCursor")
	}
	if r.Boot() != BootCURE || r.CUREWindow() != "w7" || r.RunnerAddr() != "a:1,b:2" || r.FreshCURE() != "resumed" || r.OOBSubmission("bmc-fw") != "submitted task /t/1" {
		t.Errorf("string accessors: %v", r.Data)
	}

	// Zero values remove their keys.
	r.SetBMCResetAt(time.Time{})
	r.SetFreshCURE("")
	if _, ok := r.Data["bmc_reset_at"]; ok {
		t.Error("SetBMCResetAt(zero) kept the key")
	}
	if _, ok := r.Data["fresh_cure"]; ok {
		t.Error(`SetFreshCURE("") kept the key`)
	}
	if got, err := r.BMCResetAt(); !got.IsZero() || err != nil {
		t.Errorf("BMCResetAt after clearing = %v, %v", got, err)
	}
	// Unset is stored as the empty value, as before.
	r.SetBoot(BootUnset)
	if v, ok := r.Data["boot"]; !ok || v != "" {
		t.Errorf(`SetBoot(BootUnset): Data["boot"] = %q, %t`, v, ok)
	}
}

func TestRunHostTokensKeepNewest(t *testing.T) {
	var r Run
	for i := range MaxHostTokens + 3 {
		r.AddHostToken(string(rune('a' + i)))
	}
	got := r.HostTokens()
	if len(got) != MaxHostTokens || got[0] != "d" || got[len(got)-1] != "k" {
		t.Errorf("HostTokens = %v, want the newest %d (d..k)", got, MaxHostTokens)
	}
	if r.Data["host_token_sha256"] != strings.Join(got, " ") {
		t.Errorf("stored %q", r.Data["host_token_sha256"])
	}
	r.ClearHostTokens()
	if len(r.HostTokens()) != 0 {
		t.Error("ClearHostTokens left tokens")
	}
}

// A malformed stored value is an error naming the run, the key and the
// value, from the accessor and from ValidateData; never a silent zero.
func TestRunDataMalformed(t *testing.T) {
	cases := []struct {
		key, val string
		get      func(Run) error
	}{
		{"attempts/bmc", "three", func(r Run) error { _, err := r.Attempts("bmc"); return err }},
		{"attempts/bmc", "-1", func(r Run) error { _, err := r.Attempts("bmc"); return err }},
		{"attempts/bmc", "2 ", func(r Run) error { _, err := r.Attempts("bmc"); return err }},
		{"started/bmc", "yesterday", func(r Run) error { _, err := r.PhaseStartedAt("bmc"); return err }},
		{"deadline/validate", "soon", func(r Run) error { _, err := r.PhaseDeadline("validate"); return err }},
		{"host_rebooted_at", "2026-13-01T00:00:00Z", func(r Run) error { _, err := r.HostRebootedAt(); return err }},
		{"host_wait_from", "7x", func(r Run) error { _, err := r.HostWaitFrom(); return err }},
		{"host_reboot_attempt", "1.5", func(r Run) error { _, err := r.HostRebootAttempt(); return err }},
		{"bmc_reset_at", "1700000000", func(r Run) error { _, err := r.BMCResetAt(); return err }},
		{"bmc_resets", "many", func(r Run) error { _, err := r.BMCResets(); return err }},
		{"boot_requested_at", "now", func(r Run) error { _, err := r.BootRequestedAt(); return err }},
		{"assign_cursor", "0x10", func(r Run) error { _, _, err := r.AssignCursor(); return err }},
		{"boot", "usb", nil},
	}
	for _, c := range cases {
		t.Run(c.key+"="+c.val, func(t *testing.T) {
			r := Run{ID: "run-9", Data: map[string]string{c.key: c.val, "attempts/nic": "2"}}
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error for %s = %q", what, c.key, c.val)
				}
				for _, want := range []string{"run-9", c.key, `"` + c.val + `"`} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not name %s", what, err, want)
					}
				}
			}
			if c.get != nil {
				check("accessor", c.get(r))
			}
			check("ValidateData", r.ValidateData())
		})
	}
	// Keys the coordinator does not parse (free text) are never refused.
	r := Run{ID: "run-9", Data: map[string]string{"oob/x": "anything", "fresh_cure": "resumed", "unknown_later_key": "v"}}
	if err := r.ValidateData(); err != nil {
		t.Errorf("ValidateData refused free-text keys: %v", err)
	}
}
