package release

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// BaseVersion is the version before the first tag: a build of an untagged
// checkout is BaseVersion~git<commits>.<rev>, which Debian orders before
// BaseVersion itself.
const BaseVersion = "0.1.0"

// debVersionRE is Debian policy 5.6.12's upstream version (no epoch, no
// revision: nfpm writes the version as given).
var debVersionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

// DebVersion is the package version of the checkout at root: from the
// latest v* tag (git describe: "v1.2.0" is 1.2.0, 5 commits past it is
// 1.2.0+git5.<rev>), else BaseVersion~git<commits>.<rev>; ".dirty" marks
// uncommitted changes.
func DebVersion(ctx context.Context, root string) (string, error) {
	dirty := ""
	if out, err := git(ctx, root, "status", "--porcelain", "--untracked-files=no"); err != nil {
		return "", err
	} else if out != "" {
		dirty = ".dirty"
	}
	if desc, err := git(ctx, root, "describe", "--tags", "--match", "v[0-9]*", "--long", "--abbrev=12"); err == nil {
		// v1.2.0-5-g0123456789ab
		parts := strings.Split(desc, "-")
		if len(parts) >= 3 {
			base := strings.TrimPrefix(strings.Join(parts[:len(parts)-2], "-"), "v")
			base = strings.ReplaceAll(base, "-", "~")
			n, rev := parts[len(parts)-2], strings.TrimPrefix(parts[len(parts)-1], "g")
			v := base
			if n != "0" || dirty != "" {
				v = fmt.Sprintf("%s+git%s.%s%s", base, n, rev, dirty)
			}
			return checkDebVersion(v)
		}
	}
	n, err := git(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return "", err
	}
	rev, err := git(ctx, root, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "", err
	}
	return checkDebVersion(fmt.Sprintf("%s~git%s.%s%s", BaseVersion, n, rev, dirty))
}

func checkDebVersion(v string) (string, error) {
	if !debVersionRE.MatchString(v) {
		return "", fmt.Errorf("package version %q is not a Debian upstream version (digits first, then letters, digits and . + ~)", v)
	}
	return v, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
