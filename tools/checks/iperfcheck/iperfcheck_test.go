package iperfcheck

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/checks"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server starts a real iperf3 server on loopback for the test's life.
func server(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 is not installed (scripts/install-deps.sh installs it)")
	}
	port := freePort(t)
	cmd := exec.Command("iperf3", "--server", "--forceflush", "--bind", "127.0.0.1", "--port", fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Ready when it says so: a probe connection would be taken for a
	// client and spoil the next test.
	stuck := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Server listening on") {
			stuck.Stop()
			go io.Copy(io.Discard, out)
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("iperf3 server exited before listening")
	return ""
}

func TestThroughput(t *testing.T) {
	addr := server(t)
	ctx := context.Background()
	for _, o := range []Options{
		{Server: addr, Tools: checks.HostTools, Duration: time.Second, ThroughputMbps: checks.AtLeast(1)},
		{Server: addr, Tools: checks.HostTools, Duration: time.Second, Reverse: true, Streams: 2, ThroughputMbps: checks.AtLeast(1)},
	} {
		var vs []checks.Verdict
		var err error
		// The server answers one test at a time; the previous one may
		// still be closing.
		for range 20 {
			if vs, err = Check(ctx, o); err == nil || !strings.Contains(err.Error(), "busy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		if len(vs) != 1 || v.Component != "nic/lo" || v.Status != checks.Pass {
			t.Fatalf("verdicts %v", vs)
		}
		if len(v.Measurements) != 1 || v.Measurements[0].Metric != "throughputMbps" || v.Measurements[0].Unit != "Mb/s" || v.Measurements[0].Value <= 1 {
			t.Errorf("measurements %v", v.Measurements)
		}
		if want := fmt.Sprintf("streams=%d", max(1, o.Streams)); !strings.Contains(v.Observed, want) {
			t.Errorf("observed %q, want %s", v.Observed, want)
		}
		if o.Reverse != strings.Contains(v.Message, "received from "+addr) {
			t.Errorf("message %q (reverse %v)", v.Message, o.Reverse)
		}
	}
}

func TestThroughputBarAndErrors(t *testing.T) {
	addr := server(t)
	ctx := context.Background()
	vs, err := Check(ctx, Options{Server: addr, Tools: checks.HostTools, Duration: time.Second, ThroughputMbps: checks.AtLeast(1e12)})
	if err != nil {
		t.Fatal(err)
	}
	if vs[0].Status != checks.Fail || !strings.Contains(vs[0].Message, "outside throughputMbps>=1000000000000") {
		t.Errorf("under the bar: %v", vs[0])
	}
	refused := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, err = Check(ctx, Options{Server: refused, Tools: checks.HostTools, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "server "+refused+": iperf3: unable to connect to server") {
		t.Errorf("refused: %v", err)
	}
	if _, err := Check(ctx, Options{Server: addr}); err == nil {
		t.Error("ran without a way to run iperf3")
	}
}

// TestReportSizeIndependentOfDuration: the JSON report iperf3 prints does
// not grow with the run's length (a soak of hours must stay far under
// checks.MaxToolOutput): a 4 s run's report is about a 1 s run's size
// (per-second entries would add about 1 KB a second with 4 streams).
func TestReportSizeIndependentOfDuration(t *testing.T) {
	addr := server(t)
	size := func(d time.Duration) int {
		report := filepath.Join(t.TempDir(), "report.json")
		// iperf3 as the check runs it, its stdout also kept in a file.
		tee := func(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
			return exec.CommandContext(ctx, "sh", append([]string{"-c", `"$0" "$@" | tee "$REPORT"`, name}, args...)...), nil
		}
		t.Setenv("REPORT", report)
		var err error
		for range 20 { // the server may still be closing the previous test
			if _, err = Check(context.Background(), Options{Server: addr, Tools: tee, Duration: d, Streams: 4}); err == nil || !strings.Contains(err.Error(), "busy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(report)
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Size())
	}
	short, long := size(time.Second), size(4*time.Second)
	if long-short > 500 {
		t.Errorf("report of a 4 s run is %d bytes, of a 1 s run %d: it grows with the run", long, short)
	}
}

func TestSplitServer(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.2.2": "10.0.2.2 5201", "10.0.2.2:5301": "10.0.2.2 5301", "[fd00::1]:5202": "fd00::1 5202", "iperf.site": "iperf.site 5201",
	} {
		h, p, err := SplitServer(in)
		if err != nil || fmt.Sprintf("%s %d", h, p) != want {
			t.Errorf("%s: %s %d %v, want %s", in, h, p, err, want)
		}
	}
	for _, bad := range []string{"", "a:0", "a:x", ":5201", "a:70000"} {
		if _, _, err := SplitServer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
