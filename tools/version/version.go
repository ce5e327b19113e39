// Package version names the build a CURE binary came from, for the
// `--version` line every binary prints: the module version and the VCS
// revision that the Go toolchain stamps into the binary (runtime/debug),
// or a release version linked in by the release builder.
package version

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// linked is set by the release builder
// (-ldflags "-X github.com/cure-oss/cure/tools/version.linked=0.1.0~git1234abcd")
// so that a packaged binary reports the package's version rather than the
// Go pseudo-version.
var linked string

// Info is what a binary knows about its own build.
type Info struct {
	Module    string // the main module's path
	Version   string // the linked release version, else the module version, else "devel"
	Revision  string // the VCS revision, "" when built outside a checkout
	Dirty     bool   // the checkout had uncommitted changes
	GoVersion string // the toolchain that built it
}

// Get reads the build info of the running binary.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fromBuildInfo(nil, linked)
	}
	return fromBuildInfo(bi, linked)
}

func fromBuildInfo(bi *debug.BuildInfo, linkedVersion string) Info {
	info := Info{Version: "devel"}
	if bi == nil {
		if linkedVersion != "" {
			info.Version = linkedVersion
		}
		return info
	}
	info.Module = bi.Main.Path
	info.GoVersion = bi.GoVersion
	// The toolchain's pseudo-version carries "+dirty" too; Dirty says it once.
	if v := strings.TrimSuffix(bi.Main.Version, "+dirty"); v != "" && v != "(devel)" {
		info.Version = v
	}
	if linkedVersion != "" {
		info.Version = linkedVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Dirty = s.Value == "true"
		}
	}
	return info
}

// String is the `--version` line: "<binary> <version> (<revision12>[+dirty], <goversion>)".
func String(binary string) string {
	return Get().line(binary)
}

func (i Info) line(binary string) string {
	rev := i.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		rev = "unknown"
	}
	if i.Dirty {
		rev += "+dirty"
	}
	goVersion := i.GoVersion
	if goVersion == "" {
		goVersion = "unknown"
	}
	return fmt.Sprintf("%s %s (%s, %s)", binary, i.Version, rev, goVersion)
}

// Requested reports whether args (os.Args[1:]) ask for the version: a
// "--version" or "-version" before any "--". Binaries whose argument
// parsing would otherwise reject or act on the rest use it before parsing;
// cure-init, PID 1 in the image, answers only then and never otherwise.
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "-version":
			return true
		}
	}
	return false
}

// Flag registers -version on fs; after fs.Parse, the returned func prints
// the line to w and reports true when the flag was given, so main exits 0.
func Flag(fs *flag.FlagSet, binary string) func(w io.Writer) bool {
	v := fs.Bool("version", false, "print the version and exit")
	return func(w io.Writer) bool {
		if !*v {
			return false
		}
		fmt.Fprintln(w, String(binary))
		return true
	}
}
