// Package buildinfo names the build a binary came from, so that the runner
// and the coordinator can say which versions disagree when one asks the
// other for something it does not know (an unknown phase).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version is linked when set (-ldflags "-X main.version=v1.2.3"), else the
// VCS revision ("git-<sha>") or module version from the build info, else
// "devel".
func Version(linked string) string {
	if linked != "" {
		return linked
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return "git-" + strings.TrimSpace(s.Value)
			}
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "devel"
}
