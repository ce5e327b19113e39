package pool

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
)

// Every action from every state: allowed exactly where the table says,
// and a refusal names the node's state and what to do first.
func TestMoves(t *testing.T) {
	allowed := map[Action][]State{
		Drain:      {InService},
		MarkDrain:  {Draining},
		Revalidate: {Drained, Ready, RMA},
		Return:     {None, Draining, Drained, Ready},
	}
	to := map[Action]State{Drain: Draining, MarkDrain: Drained, Revalidate: Revalidating, Return: InService}
	for a, want := range allowed {
		from, got, err := Move(a)
		if err != nil || got != to[a] {
			t.Fatalf("%s: to %s, %v", a, got, err)
		}
		for _, s := range append([]State{None}, States()...) {
			ok := false
			for _, f := range from {
				ok = ok || f == s
			}
			wantOK := false
			for _, w := range want {
				wantOK = wantOK || w == s
			}
			if ok != wantOK {
				t.Errorf("%s from %s: allowed=%v, want %v", a, s.Show(), ok, wantOK)
			}
			if !ok {
				if msg := Refusal(a, s); !strings.Contains(msg, "node is "+s.Show()) || !strings.Contains(msg, string(a)+" refused") {
					t.Errorf("refusal %q", msg)
				}
			}
		}
	}
	if _, _, err := Move("teleport"); err == nil {
		t.Error("unknown action accepted")
	}
}

// Nodes the scheduler may use, or under revalidation, take no run that
// reboots them; provision and wipe end the tenancy and stay allowed; a
// drained, ready or rma node takes any.
func TestAdmit(t *testing.T) {
	for _, s := range append([]State{None}, States()...) {
		for _, m := range modes.All() {
			err := Admit(s, m)
			refused := s == Revalidating || (s == InService || s == Draining) && m != modes.Provision && m != modes.Wipe
			if (err != nil) != refused {
				t.Errorf("Admit(%s, %s) = %v, want refused=%v", s.Show(), m, err, refused)
			}
			if err != nil && !strings.Contains(err.Error(), string(s)) {
				t.Errorf("Admit(%s, %s) = %q: the state is not named", s.Show(), m, err)
			}
		}
	}
}

func TestJudge(t *testing.T) {
	pass := []Verdict{{"memory", "memtest", curev1.VerdictStatus_PASS, ""}, {"nvme/0", "smart", curev1.VerdictStatus_PASS, ""}}
	for _, tc := range []struct {
		name   string
		status curev1.RunStatus
		vs     []Verdict
		auto   bool
		to     State
		reason string
	}{
		{"clean pass", curev1.RunStatus_RUN_SUCCEEDED, pass, false, Ready, "passed (2 verdicts)"},
		{"clean pass, auto return", curev1.RunStatus_RUN_SUCCEEDED, pass, true, InService, "passed"},
		{"a FAIL", curev1.RunStatus_RUN_FAILED, append(pass, Verdict{"gpu/3", "gpu-burn", curev1.VerdictStatus_FAIL, "Xid 79"}), true, RMA, "gpu/3 gpu-burn FAIL"},
		{"a MARGINAL in a run that succeeded", curev1.RunStatus_RUN_SUCCEEDED, append(pass, Verdict{"nvme/0", "storage-random", curev1.VerdictStatus_MARGINAL, ""}), false, RMA, "nvme/0 storage-random MARGINAL"},
		{"an ERROR", curev1.RunStatus_RUN_FAILED, []Verdict{{"nic/0", "nic-throughput", curev1.VerdictStatus_ERROR, ""}}, false, RMA, "nic/0 nic-throughput ERROR"},
		{"failed without a verdict", curev1.RunStatus_RUN_FAILED, nil, false, RMA, "r1 failed: boom"},
		{"attention", curev1.RunStatus_RUN_ATTENTION, pass, false, RMA, "r1 attention: boom"},
		{"canceled", curev1.RunStatus_RUN_CANCELED, nil, true, Drained, "canceled"},
	} {
		out := Judge("r1", tc.status, "boom", tc.vs, tc.auto)
		if out.To != tc.to || !strings.Contains(out.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s with %q", tc.name, out, tc.to, tc.reason)
		}
	}
}

// Every state has its own wire value, and the wire has no state this
// package lacks.
func TestStateProto(t *testing.T) {
	seen := map[curev1.PoolState]State{}
	for _, s := range append([]State{None}, States()...) {
		v := s.Proto()
		if prev, dup := seen[v]; dup {
			t.Errorf("%s and %s share %v", prev, s, v)
		}
		seen[v] = s
	}
	if len(seen) != len(curev1.PoolState_name) {
		t.Errorf("%d states for %d wire values", len(seen), len(curev1.PoolState_name))
	}
}
