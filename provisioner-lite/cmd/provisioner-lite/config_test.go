package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
	"github.com/cure-oss/cure/tools/version"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// resolveArgs is the coordinator's configuration from a command line, a
// config file's text (none when empty) and the environment env.
func resolveArgs(t *testing.T, file string, env map[string]string, args ...string) (coordinator.Config, map[string]string, error) {
	t.Helper()
	o := newCoordOpts()
	cmd := &cobra.Command{Use: "provisioner-lite"}
	o.bind(cmd)
	path := filepath.Join(t.TempDir(), "provisioner-lite.yaml")
	if file != "" {
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	src, err := o.resolve(cmd.Flags(), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return o.config(), src, err
}

// A flag beats its CURE_* variable, which beats the config file, which
// beats the default: for strings, durations, bools, ints, floats and the
// repeatable flags (a YAML list, a comma-separated variable); a key or a
// value the coordinator does not know is refused naming the file and line,
// a bad variable naming the variable.
func TestConfigFileAndEnv(t *testing.T) {
	defer func(d string) { defaultConfigFile = d }(defaultConfigFile)
	defaultConfigFile = filepath.Join(t.TempDir(), "absent.yaml") // never this host's
	file := "# site\nstate-dir: /srv/cure\nwait-cure: 7m\nproxy-dhcp: true\nmax-runs: 3\npower-on-rate: 1.5\n" +
		"webhook:\n  - https://a.example/hook\n  - https://b.example/hook\ntls-name: [cure.example]\nlog-level: debug\n"
	def := coordinator.DefaultConfig()
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want func(coordinator.Config) bool
		src  map[string]string // flag → its source's prefix
	}{
		{"defaults", "", nil, nil, func(c coordinator.Config) bool {
			return c.StateDir == def.StateDir && c.Timeouts.WaitForCURE == def.Timeouts.WaitForCURE && c.MaxRuns == def.MaxRuns && len(c.Webhooks) == 0
		}, map[string]string{"state-dir": ""}},
		{"file", file, nil, nil, func(c coordinator.Config) bool {
			return c.StateDir == "/srv/cure" && c.Timeouts.WaitForCURE == 7*time.Minute && c.Netboot.ProxyDHCP && c.MaxRuns == 3 && c.PowerOnRate == 1.5 &&
				slices.Equal(c.Webhooks, []string{"https://a.example/hook", "https://b.example/hook"}) && slices.Equal(c.TLSNames, []string{"cure.example"})
		}, map[string]string{"state-dir": "file ", "webhook": "file ", "max-runs": "file "}},
		{"env over file", file, map[string]string{"CURE_STATE_DIR": "/var/lib/cure", "CURE_WAIT_CURE": "90s", "CURE_PROXY_DHCP": "false",
			"CURE_MAX_RUNS": "9", "CURE_WEBHOOK": "https://c.example/h, https://d.example/h", "CURE_DB": "postgres://cure@db/cure"}, nil,
			func(c coordinator.Config) bool {
				return c.StateDir == "/var/lib/cure" && c.Timeouts.WaitForCURE == 90*time.Second && !c.Netboot.ProxyDHCP && c.MaxRuns == 9 &&
					slices.Equal(c.Webhooks, []string{"https://c.example/h", "https://d.example/h"}) && c.DB == "postgres://cure@db/cure" &&
					c.PowerOnRate == 1.5 // the file still sets what the environment does not
			}, map[string]string{"state-dir": "env CURE_STATE_DIR", "webhook": "env CURE_WEBHOOK", "power-on-rate": "file "}},
		{"flag over env and file", file, map[string]string{"CURE_MAX_RUNS": "9", "CURE_WEBHOOK": "https://c.example/h"},
			[]string{"--max-runs", "11", "--proxy-dhcp=false", "--webhook", "https://e.example/h", "--wait-cure", "1m", "--state-dir", "/x"},
			func(c coordinator.Config) bool {
				return c.MaxRuns == 11 && !c.Netboot.ProxyDHCP && slices.Equal(c.Webhooks, []string{"https://e.example/h"}) &&
					c.Timeouts.WaitForCURE == time.Minute && c.StateDir == "/x"
			}, map[string]string{"max-runs": "flag", "webhook": "flag"}},
		{"CURE_CONFIG names the file", "", map[string]string{"CURE_CONFIG": "WRITE"}, nil, func(c coordinator.Config) bool { return c.MaxRuns == 3 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env["CURE_CONFIG"] == "WRITE" {
				p := filepath.Join(t.TempDir(), "c.yaml")
				os.WriteFile(p, []byte(file), 0o600)
				tc.env = map[string]string{"CURE_CONFIG": p}
			}
			c, src, err := resolveArgs(t, tc.file, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Errorf("config %+v", c)
			}
			for name, want := range tc.src {
				if got := src[name]; want == "" && got != "" || !strings.HasPrefix(got, want) {
					t.Errorf("--%s from %q, want %q", name, got, want)
				}
			}
		})
	}
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       []string
	}{
		{"unknown key", "state-dir: /srv\n\nstate_dir: /x\n", nil, []string{".yaml:3: unknown key \"state_dir\""}},
		{"bad value", "max-runs: 3\nwait-cure: soon\n", nil, []string{".yaml:2: wait-cure: \"soon\""}},
		{"list for one value", "state-dir: [a, b]\n", nil, []string{".yaml:1: state-dir: a list"}},
		{"twice", "max-runs: 1\nmax-runs: 2\n", nil, []string{".yaml:2: max-runs given twice (first at line 1)"}},
		{"not a mapping", "- state-dir\n", nil, []string{".yaml:1: want a mapping"}},
		{"bad variable", "max-runs: 3\n", map[string]string{"CURE_MAX_RUNS": "many"}, []string{"CURE_MAX_RUNS", `"many"`}},
		{"bad bool variable", "", map[string]string{"CURE_PROXY_DHCP": "maybe"}, []string{"CURE_PROXY_DHCP"}},
		{"config is no key", "config: /etc/other.yaml\n", nil, []string{".yaml:1: unknown key \"config\""}},
	} {
		_, _, err := resolveArgs(t, tc.file, tc.env)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error naming %q", tc.name, err, w)
			}
		}
	}
	// A config file given must exist; the default path may be absent.
	if _, _, err := resolveArgs(t, "", nil, "--config", filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing --config: %v, want an error naming it", err)
	}
	if _, _, err := resolveArgs(t, "", nil); err != nil {
		t.Errorf("an absent default config file: %v", err)
	}
}

// config show prints every flag (a config file the coordinator reads
// back), the sources, and no secret.
func TestConfigShow(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("db: postgres://cure:s3cret@db.example/cure?sslmode=verify-full\nmax-runs: 4\nwebhook:\n  - https://hooks.example/T0/B1/tok3n\n"), 0o600)
	t.Setenv("CURE_WAIT_CURE", "8m")
	var out, errOut bytes.Buffer
	if rc := execute([]string{"config", "show", "-config", cfg, "-proxy-dhcp"}, &out, &errOut); rc != 0 {
		t.Fatalf("config show: rc %d\n%s", rc, errOut.String())
	}
	text := out.String()
	for _, want := range []string{"max-runs: 4 # file " + cfg + ":2", "wait-cure: 8m0s # env CURE_WAIT_CURE", "proxy-dhcp: true # flag",
		"db: postgres://cure:REDACTED@db.example/cure?sslmode=verify-full", "https://hooks.example/REDACTED", "state-dir: state # default"} {
		if !strings.Contains(text, want) {
			t.Errorf("config show lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "s3cret") || strings.Contains(text, "tok3n") {
		t.Errorf("config show shows a secret:\n%s", text)
	}
	settings, err := parseConfig("shown", out.Bytes())
	if err != nil || len(settings) < 70 {
		t.Fatalf("config show's output as a config file: %d keys, %v", len(settings), err)
	}
	if err := newCoordOpts().checkKeys(showFlags(t), "shown", settings); err != nil {
		t.Errorf("config show's output is not a config file: %v", err)
	}
	out.Reset()
	if rc := execute([]string{"config", "show", "--config", cfg, "-o", "json"}, &out, &errOut); rc != 0 {
		t.Fatalf("config show -o json: rc %d", rc)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["max-runs"] != float64(4) || m["proxy-dhcp"] != false {
		t.Errorf("config show -o json: %v %v", m, err)
	}
	if got := redact("db", "host=db user=cure password='a b' dbname=cure"); got != "host=db user=cure password=REDACTED dbname=cure" {
		t.Errorf("key=value DSN redacted as %q", got)
	}
}

func showFlags(t *testing.T) *pflag.FlagSet {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	newCoordOpts().bind(cmd)
	return cmd.Flags()
}

// Go-style single-dash long flags, as scripts and docs write them, are the
// GNU ones; shorthands, negative values and what follows -- are kept.
func TestSingleDashFlags(t *testing.T) {
	defer func(d string) { defaultConfigFile = d }(defaultConfigFile)
	defaultConfigFile = filepath.Join(t.TempDir(), "absent.yaml")
	var out, errOut bytes.Buffer
	rc := execute([]string{"config", "show", "-state-dir", "/srv/x", "-wait-cure=2m", "-proxy-dhcp", "-import-artifact", "a.img", "-ojson"}, &out, &errOut)
	var m map[string]any
	if rc != 0 || json.Unmarshal(out.Bytes(), &m) != nil {
		t.Fatalf("rc %d\n%s%s", rc, out.String(), errOut.String())
	}
	if m["state-dir"] != "/srv/x" || m["wait-cure"] != "2m0s" || m["proxy-dhcp"] != true || len(m["import-artifact"].([]any)) != 1 {
		t.Errorf("single-dash flags: %v", m)
	}
	root := (&app{out: &out, errOut: &errOut}).rootCmd()
	got := normalizeArgs(root, []string{"-state-dir", "x", "-ojson", "-h", "--nodes", "-1", "-no-such", "--", "-state-dir"})
	want := []string{"--state-dir", "x", "-ojson", "-h", "--nodes", "-1", "--no-such", "--", "-state-dir"}
	if !slices.Equal(got, want) {
		t.Errorf("normalizeArgs: %q, want %q", got, want)
	}
	errOut.Reset()
	if rc := execute([]string{"-no-such-flag"}, &out, &errOut); rc != 2 || !strings.Contains(errOut.String(), "unknown flag: --no-such-flag") {
		t.Errorf("-no-such-flag: rc %d %s", rc, errOut.String())
	}
}

// --version, -version and version print tools/version's line; man writes
// a page per command; completion scripts come from cobra; every command's
// help documents its exit codes.
func TestVersionManCompletion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errOut bytes.Buffer
		if rc := execute(args, &out, &errOut); rc != 0 || out.String() != version.String("provisioner-lite")+"\n" {
			t.Errorf("%q: rc %d %q", args, rc, out.String())
		}
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if rc := execute([]string{"man", "--dir", dir}, &out, &errOut); rc != 0 {
		t.Fatalf("man: rc %d %s", rc, errOut.String())
	}
	for _, page := range []string{"provisioner-lite.1", "provisioner-lite-check.1", "provisioner-lite-pki-offline.1", "provisioner-lite-config-show.1", "provisioner-lite-artifacts-add.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !bytes.Contains(b, []byte("Exit codes")) {
			t.Errorf("%s: %v, or no exit codes", page, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "provisioner-lite.1")); !bytes.Contains(b, []byte("state-dir")) {
		t.Errorf("provisioner-lite.1 has no coordinator flags")
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out.Reset()
		if rc := execute([]string{"completion", sh}, &out, &errOut); rc != 0 || !strings.Contains(out.String(), "provisioner-lite") {
			t.Errorf("completion %s: rc %d", sh, rc)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !strings.Contains(c.Long, "Exit codes:") {
			t.Errorf("%s: no exit codes in its help", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{out: &out, errOut: &errOut}).rootCmd())
}

// The config file parser never panics and reports each key's line.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("state-dir: /srv\nwebhook:\n  - https://a\n"))
	f.Add([]byte("- x\n"))
	f.Add([]byte("a: &x 1\nb: *x\nc: {d: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		settings, err := parseConfig("f.yaml", data)
		for _, s := range settings {
			if err == nil && (s.line < 1 || len(s.values) == 0 && !s.list) {
				t.Errorf("setting %+v", s)
			}
		}
	})
}
