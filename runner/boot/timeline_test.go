package boot

import (
	"os"
	"strings"
	"testing"
	"time"
)

// A /dev/kmsg excerpt from a CURE boot under QEMU (Debian 6.1), with a
// continuation line and a record whose message only contains a stage text.
const kmsgSample = `6,300,1101362,-;Trying to unpack rootfs image as initramfs...
6,301,1103205,-;Initialise system trusted keyrings
 SUBSYSTEM=acpi
6,330,2024400,-;Freeing initrd memory: 18840K
4,331,2030000,-;audit: "Run /init as init process" quoted by a driver
6,360,2659495,-;Run /init as init process
6,361,2659500,-;  with arguments:
6,380,9000000,-;Run /init as init process
`

func TestParseKernelStages(t *testing.T) {
	got, err := ParseKernelStages(strings.NewReader(kmsgSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []Stage{
		{StageInitramfsUnpackStart, 1101362 * time.Microsecond},
		{StageInitramfsUnpacked, 2024400 * time.Microsecond},
		{StageInitStarted, 2659495 * time.Microsecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("stage %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestParseKernelStagesSkipsMalformed(t *testing.T) {
	in := "garbage\n6,1,notanumber,-;Run /init as init process\n6,2,-5,-;Run /init as init process\n6,3,1500000,-;Run /init as init process\n"
	got, err := ParseKernelStages(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Uptime != 1500*time.Millisecond {
		t.Fatalf("got %v, want init_started at 1.5s only", got)
	}
}

func TestTimelineKeepsFirstMarkAndSorts(t *testing.T) {
	clock := []time.Duration{3 * time.Second, 5 * time.Second, 6 * time.Second}
	tl := &Timeline{now: func() time.Duration { d := clock[0]; clock = clock[1:]; return d }}
	tl.Mark(StageRunnerStarted)
	tl.Add(Stage{StageInitStarted, 2 * time.Second})
	tl.Mark(StageDHCPBound)
	tl.Mark(StageDHCPBound) // a retry does not move it
	st := tl.Stages()
	names := []string{}
	for _, s := range st {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "init_started,runner_started,dhcp_bound" {
		t.Fatalf("order %v", names)
	}
	if st[2].Uptime != 5*time.Second {
		t.Fatalf("dhcp_bound moved to %v", st[2].Uptime)
	}
	if s := tl.String(); s != "init_started=2.00s(+2.00s) runner_started=3.00s(+1.00s) dhcp_bound=5.00s(+2.00s)" {
		t.Fatalf("String() = %q", s)
	}
}

func FuzzParseKernelStages(f *testing.F) {
	f.Add(kmsgSample)
	f.Add("6,1,9223372036854775807,-;Run /init as init process\n")
	f.Add(";;;\n,,;\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseKernelStages(strings.NewReader(in))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range got {
			if seen[s.Name] {
				t.Fatalf("stage %s twice", s.Name)
			}
			seen[s.Name] = true
			if s.Uptime < 0 || s.Uptime > 365*24*time.Hour {
				t.Fatalf("uptime %v out of range", s.Uptime)
			}
		}
	})
}

// On a real kernel log the reader returns at its end instead of waiting
// for the next message (a root-only device: skipped elsewhere).
func TestReadKernelStagesReturns(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := ReadKernelStages("/dev/kmsg")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && os.Geteuid() == 0 {
			t.Fatalf("ReadKernelStages(/dev/kmsg): %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ReadKernelStages blocked at the end of the kernel log")
	}
}
