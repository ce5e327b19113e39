package perftest

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		file              string
		test, dev, link   string
		bytes, iters      int64
		avgGbps, peakGbps float64
		err               string
	}{
		// 45920.87 MiB/s = 45920.87 * 2^20 * 8 / 1e9 Gb/s
		{file: "write-client-mbs.txt", test: "RDMA_Write BW Test", dev: "mlx5_0", link: "IB", bytes: 65536, iters: 5000, avgGbps: 385.21, peakGbps: 385.23},
		{file: "read-roce-gbits.txt", test: "RDMA_Read BW Test", dev: "mlx5_1", link: "Ethernet", bytes: 65536, iters: 5000, avgGbps: 371.52, peakGbps: 371.84},
		{file: "no-device.txt", err: "no result: Did not detect devices; Unable to find the Infiniband/RoCE device"},
		{file: "connect-refused.txt", err: "no result: Couldn't connect to 10.1.0.1:18515; Unable to init the socket connection"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Parse(b)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Test != tc.test || r.Device != tc.dev || r.LinkType != tc.link || r.Bytes != tc.bytes || r.Iters != tc.iters {
				t.Errorf("report %+v", r)
			}
			if math.Abs(r.AvgGbps-tc.avgGbps) > 0.01 || math.Abs(r.PeakGbps-tc.peakGbps) > 0.01 {
				t.Errorf("avg %.3f peak %.3f Gb/s, want %.2f %.2f", r.AvgGbps, r.PeakGbps, tc.avgGbps, tc.peakGbps)
			}
		})
	}
	for _, bad := range []string{"", " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536 x 1 2 3\n",
		" #bytes     #iterations    BW peak[kB/sec]    BW average[kB/sec]   MsgRate[Mpps]\n",
		" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536 5000 1 -2 3\n"} {
		if r, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", bad, r)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range []string{"write-client-mbs.txt", "read-roce-gbits.txt", "no-device.txt"} {
		b, _ := os.ReadFile("testdata/" + n)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err == nil && (r.Iters <= 0 || r.AvgGbps < 0 || math.IsNaN(r.AvgGbps)) {
			t.Fatalf("accepted %+v", r)
		}
	})
}
