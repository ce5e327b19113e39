package peerlimit

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// FuzzHTTPErrorLog: whatever an http.Server writes to its ErrorLog (the
// text carries peer addresses and TLS errors a peer provokes), a line is
// counted or logged within bounds and never panics; what reaches the log
// is bounded in length.
func FuzzHTTPErrorLog(f *testing.F) {
	f.Add("http: TLS handshake error from 10.0.0.1:4242: EOF")
	f.Add("http: TLS handshake error from [2001:db8::1]:443: tls: first record does not look like a TLS handshake")
	f.Add("http: TLS handshake error from 10.0.0.1:1: read tcp: use of closed network connection")
	f.Add("http: TLS handshake error from : ")
	f.Add("http: Accept error: accept tcp [::]:8080: accept4: too many open files; retrying in 5ms")
	f.Add(strings.Repeat("x", 5000))
	f.Fuzz(func(t *testing.T, line string) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		r := NewRefusals(log, "web", slog.LevelWarn, time.Hour)
		el := HTTPErrorLog(r, log)
		for i := 0; i < 3; i++ {
			el.Print(line)
		}
		r.Flush()
		if n := strings.Count(buf.String(), "\n"); n > 6 {
			t.Fatalf("3 server errors wrote %d lines", n)
		}
		if buf.Len() > 3*4096 {
			t.Fatalf("3 server errors wrote %d bytes", buf.Len())
		}
	})
}
