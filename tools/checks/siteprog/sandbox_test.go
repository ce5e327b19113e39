package siteprog_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/testenv"
)

// artifacts is a content-addressed artifact server as the coordinator
// serves one: /artifacts/sha256/<sha256>.
type artifacts struct {
	srv   *httptest.Server
	files map[string][]byte
}

func newArtifacts(t *testing.T) *artifacts {
	a := &artifacts{files: map[string][]byte{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := a.files[strings.TrimPrefix(r.URL.Path, "/artifacts/sha256/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// program serves src and returns the Program that pins it.
func (a *artifacts) program(check, src string, limit time.Duration) siteprog.Program {
	sum := sha256.Sum256([]byte(src))
	h := hex.EncodeToString(sum[:])
	a.files[h] = []byte(src)
	return siteprog.Program{Check: check, URL: a.srv.URL + "/artifacts/sha256/" + h,
		Want: artifact.Want{SHA256: h, Size: int64(len(src))}, Limit: limit}
}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "site programs are sandboxed with namespaces and another uid")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// probe is a site program that reports what it can see as verdicts, one
// per fact, the fact in observed.
const probe = `#!/bin/sh
fact() { printf '{"component":"%s","status":"PASS","observed":"%s"}\n' "$1" "$2"; }
fact ids "$(id -u):$(id -g):$(id -G)"
fact pid "$$"
fact cwd "$(pwd)"
fact cmdline-bytes "$(cat /proc/cmdline 2>/dev/null | wc -c)"
fact userns-cmdline-bytes "$(unshare -Urpf --mount-proc cat /proc/cmdline 2>/dev/null | wc -c)"
fact kmsg-token "$(dd if=/dev/kmsg iflag=nonblock bs=65536 2>/dev/null | grep -c "$CURE_PARAM_token")"
fact dmesg-token "$(dmesg 2>/dev/null | grep -c "$CURE_PARAM_token")"
fact syslog "$(dmesg -S >/dev/null 2>&1 && echo readable || echo refused)"
fact runner-environ "$(cat /proc/$CURE_PARAM_runner/environ >/dev/null 2>&1 && echo readable || echo refused)"
fact env-token "$(env | grep -c TOKEN)"
fact env-names "$(env | cut -d= -f1 | grep -v -e '^PWD$' -e '^SHLVL$' -e '^_$' -e '^OLDPWD$' | sort | tr '\n' ' ')"
fact leaked-fd "$([ -e /proc/$$/fd/$CURE_PARAM_fd ] && echo open || echo closed)"
fact caps "$(grep CapEff /proc/self/status | tr -d '\t')"
fact nonewprivs "$(grep NoNewPrivs /proc/self/status | tr -d '\t')"
fact tmp "$(touch /tmp/$CURE_PARAM_marker && echo written)"
fact netdevs "$(tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')"
setsid sleep $CURE_PARAM_sleep </dev/null >/dev/null 2>&1 &
`

// TestSandbox: what a site program sees. It runs as nobody with no
// capabilities and no_new_privs, pid 1 of its own PID namespace, in its
// own /tmp; the kernel command line (where cure.token= is) reads empty,
// also through a user namespace of its own with a fresh /proc; the kernel
// log is refused; the runner's environment, its descriptors and its files
// in /tmp are out of reach; a process it leaves behind, even in a session
// of its own, is killed when it ends.
func TestSandbox(t *testing.T) {
	needRoot(t)
	host, err := os.ReadFile("/proc/cmdline")
	if err != nil || len(host) == 0 {
		t.Fatalf("host /proc/cmdline: %d bytes, %v", len(host), err)
	}
	// A token in the kernel log, as the boot printed cure.token=.
	token := fmt.Sprintf("cure.token=%x", time.Now().UnixNano())
	inKmsg := os.WriteFile("/dev/kmsg", []byte("siteprog test: "+token+"\n"), 0) == nil
	t.Setenv("CURE_TEST_BOOT_TOKEN", token)
	// A descriptor the runner might hold without close-on-exec.
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(token), 0o600)
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	marker := fmt.Sprintf("siteprog-marker-%d", time.Now().UnixNano())
	sleep := fmt.Sprintf("%d.%d", 3000+os.Getpid()%1000, time.Now().Nanosecond()%1000)

	a := newArtifacts(t)
	p := a.program("probe", probe, time.Minute)
	p.Params = map[string]any{"token": token, "runner": int64(os.Getpid()), "fd": int64(fd), "marker": marker, "sleep": sleep}
	vs, err := siteprog.Runner{Log: quiet(), KillGrace: 100 * time.Millisecond}.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vs {
		got[v.Component] = v.Observed
	}
	want := map[string]string{
		"ids": "65534:65534:65534", "pid": "1", "cwd": siteprog.WorkDir,
		"cmdline-bytes": "0", "userns-cmdline-bytes": "0", "kmsg-token": "0", "dmesg-token": "0", "syslog": "refused",
		"runner-environ": "refused", "env-token": "0",
		"env-names":  "CURE_CHECK CURE_PARAMS CURE_PARAM_fd CURE_PARAM_marker CURE_PARAM_runner CURE_PARAM_sleep CURE_PARAM_token CURE_TIMEOUT_SECONDS HOME PATH TMPDIR ",
		"leaked-fd":  "closed",
		"caps":       "CapEff:0000000000000000",
		"nonewprivs": "NoNewPrivs:1",
		"tmp":        "written",
		"netdevs":    "lo ",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if !inKmsg {
		t.Log("could not write the kernel log here: the kmsg-token fact read a log without the token")
	}
	if _, err := os.Stat(filepath.Join("/tmp", marker)); !os.IsNotExist(err) {
		t.Errorf("the program's /tmp file is in the node's /tmp: %v", err)
	}
	if pids := processes("sleep " + sleep); len(pids) > 0 {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("the program's setsid child outlived it: pids %v", pids)
	}
}

// TestSandboxNetwork: by default a site program has a network namespace of
// its own (only a loopback, down), so it cannot speak on the provisioning
// network as the node; a suite's `network: node` gives it the node's.
func TestSandboxNetwork(t *testing.T) {
	needRoot(t)
	const netdevs = `#!/bin/sh
printf '{"component":"netdevs","status":"PASS","observed":"%s"}\n' "$(tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')"
`
	host, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(host), "\n") < 4 {
		t.Skip("this host has no interface but lo: nothing to tell the namespaces apart by")
	}
	a := newArtifacts(t)
	for _, tc := range []struct {
		network bool
		own     bool
	}{{false, true}, {true, false}} {
		p := a.program("netdevs", netdevs, time.Minute)
		p.Network = tc.network
		vs, err := siteprog.Runner{Log: quiet(), KillGrace: 100 * time.Millisecond}.Run(context.Background(), p)
		if err != nil || len(vs) != 1 {
			t.Fatalf("network %v: %v %v", tc.network, vs, err)
		}
		if own := vs[0].Observed == "lo "; own != tc.own {
			t.Errorf("network %v: the program saw interfaces %q (own namespace %v, want %v)", tc.network, vs[0].Observed, own, tc.own)
		}
	}
}

// processes lists the pids whose command line is cmd.
func processes(cmd string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") == cmd {
			out = append(out, pid)
		}
	}
	return out
}

// TestRunRefusals: a run the Runner refuses is one error and no verdict:
// over its time limit (the process group is killed), over its output
// bound on either stream, a pin the served bytes do not match, output
// outside the schema, undeclared params, nothing printed. A non-zero exit
// keeps the verdicts beside the error.
func TestRunRefusals(t *testing.T) {
	needRoot(t)
	a := newArtifacts(t)
	r := siteprog.Runner{Log: quiet(), KillGrace: 100 * time.Millisecond, MaxOutput: 64 << 10}
	ok := `{"component":"x/0","status":"PASS"}`
	for _, tc := range []struct {
		name, src string
		limit     time.Duration
		params    map[string]any
		want      string
		verdicts  int
	}{
		{"time limit", "#!/bin/sh\necho '" + ok + "'\nsleep 60 &\nsleep 60\n", 300 * time.Millisecond, nil, "still running at its time limit 300ms: killed with its process group", 0},
		{"stdout bound", "#!/bin/sh\nwhile :; do echo '" + ok + "'; done\n", time.Minute, nil, "printed more than 65536 bytes on stdout", 0},
		{"stderr bound", "#!/bin/sh\necho '" + ok + "'\nhead -c 100000 /dev/zero >&2\nsleep 60\n", time.Minute, nil, "printed more than 65536 bytes on stderr", 0},
		{"schema", "#!/bin/sh\necho '{\"component\":\"x/0\",\"status\":\"PASS\",\"run_id\":\"other\"}'\n", time.Minute, nil, `line 1: unknown field "run_id"`, 0},
		{"undeclared param", "#!/bin/sh\necho '{\"metadata\":{\"name\":\"p\",\"parameters\":[\"a\"]}}'\necho '" + ok + "'\n", time.Minute, map[string]any{"a": "1", "typo": "2"},
			"params typo: the program's metadata does not declare them (it reads a)", 0},
		{"no verdict", "#!/bin/sh\necho working >&2\n", time.Minute, nil, "printed no verdict", 0},
		{"exit status", "#!/bin/sh\necho '" + ok + "'\necho 'ipmitool: no device' >&2\nexit 3\n", time.Minute, nil, "exited with status 3", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := a.program(tc.name, tc.src, tc.limit)
			p.Params = tc.params
			vs, err := r.Run(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || len(vs) != tc.verdicts {
				t.Fatalf("verdicts %v, error %v; want %d verdicts and an error containing %q", vs, err, tc.verdicts, tc.want)
			}
		})
	}
	t.Run("pin", func(t *testing.T) {
		p := a.program("pin", "#!/bin/sh\necho '"+ok+"'\n", time.Minute)
		p.Want.SHA256 = strings.Repeat("0", 64)
		vs, err := r.Run(context.Background(), p)
		if err == nil || !strings.Contains(err.Error(), "site program refused") || vs != nil {
			t.Fatalf("%v %v", vs, err)
		}
	})
	t.Run("the suite's context stops it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := r.Run(ctx, a.program("cancel", "#!/bin/sh\nsleep 60\n", time.Minute))
		if err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("measurements", func(t *testing.T) {
		vs, err := r.Run(context.Background(), a.program("m", "#!/bin/sh\necho '{\"component\":\"bmc/sel\",\"status\":\"FAIL\",\"observed\":\"2\",\"expected\":\"0\",\"detail\":\"PSU\",\"measurements\":[{\"metric\":\"selCritical\",\"value\":2,\"unit\":\"entries\"}]}'\n", time.Minute))
		if err != nil || len(vs) != 1 || vs[0].Status != checks.Fail || vs[0].Message != "PSU" || vs[0].Measurements[0].Unit != "entries" {
			t.Fatalf("%+v %v", vs, err)
		}
	})
}
