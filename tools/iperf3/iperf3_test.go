package iperf3

import (
	"os"
	"path/filepath"
	"testing"
)

func load(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		file      string
		reverse   bool
		streams   int
		sent, rcv float64
		retrans   int64
	}{
		{"client.json", false, 1, 5717869327.28357, 5717803596.829608, 3},
		{"reverse-2streams.json", true, 2, 7851024290.364268, 7835973186.120663, 24},
	} {
		r, err := Parse(load(t, c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if r.Error != "" || r.Version != "iperf 3.12" || r.Reverse != c.reverse || r.Streams != c.streams ||
			r.SentBps != c.sent || r.ReceivedBps != c.rcv || r.Retransmits != c.retrans {
			t.Errorf("%s: %+v", c.file, r)
		}
		if r.LocalHost != "127.0.0.1" || r.Remote != "127.0.0.1:5299" || r.DurationSec < 2 || r.DurationSec > 2.1 {
			t.Errorf("%s: local %s remote %s duration %v", c.file, r.LocalHost, r.Remote, r.DurationSec)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for file, want := range map[string]string{
		"refused.json":     "unable to connect to server: Connection refused",
		"server-busy.json": "the server is busy running a test. try again later",
	} {
		r, err := Parse(load(t, file))
		if err != nil || r.Error != want || r.ReceivedBps != 0 {
			t.Errorf("%s: %+v %v, want error %q", file, r, err, want)
		}
	}
	good := load(t, "client.json")
	for name, in := range map[string][]byte{
		"empty":         nil,
		"truncated":     good[:len(good)/2],
		"trailing data": append(append([]byte{}, good...), '{', '}'),
		"no stream":     []byte(`{"start":{"connected":[]},"end":{}}`),
		"negative rate": []byte(`{"start":{"connected":[{"remote_host":"a"}]},"end":{"sum_received":{"bits_per_second":-1}}}`),
	} {
		if _, err := Parse(in); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
