package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
)

func samplePipelines() []PipelineState {
	now := time.Date(2026, 11, 29, 5, 45, 0, 123456789, time.UTC)
	full := PipelineState{RunnerAddr: "10.0.0.1:8443,10.0.0.2:8443", CUREWindow: "w<1>&", BootRequestedAt: now,
		FreshCURE: "a \"quoted\" <reason> & more\n", CUREMACs: []string{"52:54:00:00:00:01"}, HostTokens: []string{"ab", "cd"},
		Phases: map[modes.PhaseName]PhaseState{}, Malformed: "\u2028"}
	for _, ph := range []modes.PhaseName{"power_on", "wait_for_cure", "inventory", "bmc", "bios", "install"} {
		full.Phases[ph] = PhaseState{Attempts: 2, StartedAt: now, Deadline: now.Add(time.Hour), Ended: ph != "install"}
	}
	full.Batch = &RunnerBatch{}
	full.Pair = &PairWork{Check: "nccl", Verdicts: []byte{0, 1, 2}}
	return []PipelineState{{}, full}
}

// marshalPipeline writes exactly json.Marshal's text (HTML escaping, no
// trailing newline): rows written before and after compare equal, so
// UpdateRun's diff sees no change where there is none.
func TestMarshalPipelineAsMarshal(t *testing.T) {
	for i, p := range samplePipelines() {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshalPipeline(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Fatalf("state %d:\n got %s\nwant %s", i, got, want)
		}
		if i == 0 && got != "{}" {
			t.Fatalf("an empty state is %q, want {}", got)
		}
	}
}

// BenchmarkMarshalPipeline: json.Marshal copied into a string (before)
// against the encoder writing into the string (marshalPipeline), same run.
func BenchmarkMarshalPipeline(b *testing.B) {
	p := samplePipelines()[1]
	b.Run("marshal-string", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			_ = string(out)
		}
	})
	b.Run("encoder-builder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalPipeline(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
