// Package iperf3 reads iperf3's JSON report (--json): the throughput the
// receiver saw, the sender's retransmits, the streams connected, and the
// error iperf3 reports in the JSON (with --json, iperf3 3.12 exits 0 even
// when it could not connect: the "error" member is the only sign). It runs
// nothing; the nic-throughput check builds the command line.
package iperf3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// MaxReport bounds the report read (one interval entry per second).
const MaxReport = 8 << 20

// Report is one iperf3 client run.
type Report struct {
	Version string
	// Error is iperf3's own error ("unable to connect to server:
	// Connection refused", "the server is busy running a test. try again
	// later"); the measurements are empty then.
	Error     string
	Reverse   bool // the server sent, the client received
	Streams   int
	LocalHost string // the client's address of the first stream
	Remote    string // host:port of the server
	// SentBps and ReceivedBps are bits per second summed over streams,
	// as the sender and the receiver counted them.
	SentBps, ReceivedBps float64
	Retransmits          int64
	DurationSec          float64
}

type wire struct {
	Start struct {
		Version   string `json:"version"`
		Connected []struct {
			LocalHost  string `json:"local_host"`
			RemoteHost string `json:"remote_host"`
			RemotePort int    `json:"remote_port"`
		} `json:"connected"`
		TestStart struct {
			NumStreams int `json:"num_streams"`
			Reverse    int `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		SumSent struct {
			Seconds     float64 `json:"seconds"`
			BitsPerSec  float64 `json:"bits_per_second"`
			Retransmits int64   `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Seconds    float64 `json:"seconds"`
			BitsPerSec float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// Parse reads iperf3's JSON report. A report with an error member parses
// (Report.Error says what went wrong); one with neither an error nor a
// connected stream is malformed.
func Parse(b []byte) (*Report, error) {
	if len(b) > MaxReport {
		return nil, fmt.Errorf("iperf3: report of %d bytes is over the %d-byte bound", len(b), MaxReport)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	var w wire
	if err := d.Decode(&w); err != nil {
		return nil, fmt.Errorf("iperf3: JSON report: %w", err)
	}
	if d.More() {
		return nil, errors.New("iperf3: data after the JSON report")
	}
	r := &Report{Version: w.Start.Version, Error: w.Error, Reverse: w.Start.TestStart.Reverse != 0,
		Streams: w.Start.TestStart.NumStreams}
	if r.Error != "" {
		return r, nil
	}
	if len(w.Start.Connected) == 0 {
		return nil, errors.New("iperf3: the report has no connected stream and no error")
	}
	c := w.Start.Connected[0]
	r.LocalHost, r.Remote = c.LocalHost, fmt.Sprintf("%s:%d", c.RemoteHost, c.RemotePort)
	r.SentBps, r.ReceivedBps = w.End.SumSent.BitsPerSec, w.End.SumReceived.BitsPerSec
	r.Retransmits, r.DurationSec = w.End.SumSent.Retransmits, w.End.SumReceived.Seconds
	for _, v := range []float64{r.SentBps, r.ReceivedBps, r.DurationSec} {
		if v < 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("iperf3: rate or duration %v out of range", v)
		}
	}
	if r.Retransmits < 0 || r.Streams < 0 {
		return nil, errors.New("iperf3: negative count")
	}
	return r, nil
}
