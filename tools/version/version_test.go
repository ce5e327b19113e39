package version

import (
	"bytes"
	"flag"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/cure-oss/cure", Version: "v0.0.0-20260101000000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   string
	}{
		{"stamped dirty checkout", bi, "", "cure-build v0.0.0-20260101000000-0123456789ab (0123456789ab+dirty, go1.26.8)"},
		{"release version linked", bi, "0.1.0~git0123456789ab", "cure-build 0.1.0~git0123456789ab (0123456789ab+dirty, go1.26.8)"},
		{"devel without VCS", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "cure-build devel (unknown, go1.26.8)"},
		{"no build info", nil, "", "cure-build devel (unknown, unknown)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fromBuildInfo(c.bi, c.linked).line("cure-build"); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	info := fromBuildInfo(bi, "")
	if info.Module != "github.com/cure-oss/cure" || !info.Dirty || info.Revision != bi.Settings[0].Value {
		t.Errorf("info fields: %+v", info)
	}
}

func TestStringOfThisBinary(t *testing.T) {
	got := String("version.test")
	if !strings.HasPrefix(got, "version.test ") || !strings.HasSuffix(got, ", "+runtime.Version()+")") {
		t.Errorf("String: %q (want the binary name first and %s last)", got, runtime.Version())
	}
}

func TestRequested(t *testing.T) {
	cases := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--spec", "x", "--version"}, true},
		{[]string{"--", "--version"}, false},
		{[]string{"--versions"}, false},
		{[]string{"console=ttyS0"}, false},
	}
	for _, c := range cases {
		if got := Requested(c.args); got != c.want {
			t.Errorf("Requested(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	printVersion := Flag(fs, "x")
	if err := fs.Parse([]string{"--version"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if !printVersion(&out) || !strings.HasPrefix(out.String(), "x ") || !strings.HasSuffix(out.String(), ")\n") {
		t.Errorf("--version: %v %q", printVersion(&out), out.String())
	}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	printVersion = Flag(fs, "x")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if printVersion(&out) || out.Len() != 0 {
		t.Errorf("without --version: printed %q", out.String())
	}
}
