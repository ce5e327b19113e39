package phases

import (
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/diskimage"
)

func TestStreamStages(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		stream time.Duration
		st     diskimage.Stages
		want   []stageTime
	}{
		{10 * s, diskimage.Stages{}, []stageTime{{"stream", 10 * s}}},
		{10 * s, diskimage.Stages{Download: 5 * s, Decode: 2 * s, Write: 2 * s}, []stageTime{{"download", 5 * s}, {"decode", 2 * s}, {"write", 3 * s}}},
		{10 * s, diskimage.Stages{Download: 10 * s, Decode: 5 * s, Write: 5 * s}, []stageTime{{"download", 5 * s}, {"decode", 2500 * time.Millisecond}, {"write", 2500 * time.Millisecond}}},
	} {
		got := streamStages(c.stream, c.st)
		var sum time.Duration
		for _, g := range got {
			sum += g.d
		}
		if sum != c.stream {
			t.Errorf("streamStages(%v, %+v) adds up to %v", c.stream, c.st, sum)
		}
		if len(got) != len(c.want) {
			t.Fatalf("streamStages(%v, %+v) = %v, want %v", c.stream, c.st, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("streamStages(%v, %+v) = %v, want %v", c.stream, c.st, got, c.want)
				break
			}
		}
	}
}
