package telemetry

import "testing"

// FuzzProcStat: whatever /proc/stat holds, the parser does not panic and
// every CPU it reads has busy within total.
func FuzzProcStat(f *testing.F) {
	f.Add([]byte("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 100 5 20 1000 50 3 2 1 0 0\nintr 5\n"))
	f.Add([]byte("cpu7 1 1 1 1\ncpu-1 1 1 1 1\ncpu18446744073709551615 1 1 1 1 1 1 1 1"))
	f.Add([]byte("cpu0 18446744073709551615 18446744073709551615 1 1 1 1 1 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for id, c := range parseProcStat(b) {
			if id < 0 || c.busy > c.total {
				t.Fatalf("cpu%d: %+v", id, c)
			}
		}
	})
}
