// Package optools is cure-tools, the debug shell's on-demand tools: the
// operator-only programs (nvme-cli, fio, ...) that the runner never calls
// are not in the image but in the tool bundle, whose sha256 and size the
// image pins (/etc/cure/toolbundle.json, written by cure-build). Fetch
// downloads the bundle from the coordinator's artifact server (cure.http=),
// checks it against the pin before anything reads it, unpacks only the
// asked tools' files into DIR/<tool>/ and writes DIR/bin/<tool>, a script
// whose interpreter is cure-tools itself (`#!/bbin/cure-tools run`), so the
// program runs through the bundle's loader and libraries with
// `export PATH=DIR/bin:$PATH`. The image has no /bin/sh able to pass
// arguments on, hence the shebang into the busybox.
package optools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// Defaults of the image.
const (
	PinFile = "/etc/cure/toolbundle.json"
	Dir     = "/run/cure-tools"
	Self    = "/bbin/cure-tools"
)

// Config says what the image pins and where tools go.
type Config struct {
	Pin     *toolbundle.Pin
	PinFile string // where Pin was read, for messages
	// BaseURL is the coordinator's artifact server (cure.http=).
	BaseURL string
	// Dir receives the tools (DIR/<tool>/) and their wrappers (DIR/bin/).
	Dir string
	// Self is the wrappers' interpreter: this command's path.
	Self string
	// Client is the HTTP client (nil: direct, with connect and header
	// timeouts); Timeout bounds the whole download (0: 10 min).
	Client  *http.Client
	Timeout time.Duration
}

// Plan is a checked fetch: what to download and what to unpack.
type Plan struct {
	URL   string
	Want  artifact.Want
	Tools []toolbundle.PinTool
}

// MakePlan checks a fetch of tools before anything is done: the names
// must be in the pin, and cure.http= must be known.
func (c Config) MakePlan(tools []string) (*Plan, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("name a tool to fetch (the bundle has %s)", strings.Join(c.Pin.Names(), ", "))
	}
	p := &Plan{Want: artifact.Want{Size: c.Pin.Size, SHA256: c.Pin.SHA256}}
	seen := map[string]bool{}
	for _, n := range tools {
		t, ok := c.Pin.Tool(n)
		if !ok {
			return nil, fmt.Errorf("the tool bundle pinned by %s has no %q (it has %s)", c.PinFile, n, strings.Join(c.Pin.Names(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			p.Tools = append(p.Tools, t)
		}
	}
	if c.BaseURL == "" {
		return nil, errors.New("the kernel command line has no cure.http= (the coordinator's artifact server, set when the coordinator boots the node): " +
			"give it with -http http://HOST:PORT")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cure.http=%q is not an http://HOST:PORT URL", c.BaseURL)
	}
	p.URL = strings.TrimRight(c.BaseURL, "/") + "/artifacts/sha256/" + c.Pin.SHA256
	return p, nil
}

// Installed is one tool made available by Fetch.
type Installed struct {
	toolbundle.PinTool
	Dir     string // DIR/<tool>: bin/<tool> and lib/
	Wrapper string // DIR/bin/<tool>
}

// Fetch downloads the bundle, verifies it against the pin and unpacks the
// plan's tools, each replacing an earlier copy. The archive is removed
// when done; on an error nothing half-written is left.
func (c Config) Fetch(ctx context.Context, p *Plan) ([]Installed, error) {
	if err := os.MkdirAll(filepath.Join(c.Dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	client := c.Client
	if client == nil {
		client = defaultClient()
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	archive, err := toolbundle.Fetch(ctx, artifact.Fetcher{Client: client, Timeout: timeout},
		toolbundle.Ref{URL: p.URL, Want: p.Want}, c.Dir)
	if err != nil {
		return nil, c.explain(p, err)
	}
	defer os.Remove(archive)
	var out []Installed
	for _, t := range p.Tools {
		in, err := c.unpack(archive, t)
		if err != nil {
			return out, err
		}
		out = append(out, in)
	}
	return out, nil
}

// explain turns a failed download into what a person at the console can
// act on.
func (c Config) explain(p *Plan, err error) error {
	var se *artifact.StatusError
	var ue *url.Error
	switch {
	case errors.Is(err, artifact.ErrMismatch):
		return fmt.Errorf("refused, not the tool bundle this image pins (%s): %w; "+
			"the coordinator serves another bundle than the image was built with: start it with the --tool-bundle built beside this image, or rebuild the image (make image)",
			c.PinFile, err)
	case errors.As(err, &se):
		return fmt.Errorf("the coordinator does not serve the tool bundle this image pins (sha256 %s, %d bytes; %s): %w; "+
			"start it with --tool-bundle out/toolbundle/toolbundle.tar.zst, built with this image",
			p.Want.SHA256, p.Want.Size, c.PinFile, err)
	case errors.As(err, &ue) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return fmt.Errorf("cannot reach the coordinator's artifact server %s (cure.http=): %w; is the network up (ip addr, dhclient) and the coordinator running?", c.BaseURL, err)
	}
	return err
}

func (c Config) unpack(archive string, t toolbundle.PinTool) (Installed, error) {
	in := Installed{PinTool: t, Dir: filepath.Join(c.Dir, t.Name), Wrapper: filepath.Join(c.Dir, "bin", t.Name)}
	f, err := os.Open(archive)
	if err != nil {
		return in, err
	}
	defer f.Close()
	tmp, err := os.MkdirTemp(c.Dir, "."+t.Name+"-")
	if err != nil {
		return in, err
	}
	defer os.RemoveAll(tmp)
	if _, err := toolbundle.Unpack(f, tmp, toolbundle.Options{Tools: []string{t.Name}}); err != nil {
		return in, fmt.Errorf("%s: %w", t.Name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return in, err
	}
	// Swap in the new copy; the old one (a previous fetch) goes.
	old := tmp + ".old"
	if err := os.Rename(in.Dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return in, err
	}
	if err := os.Rename(tmp, in.Dir); err != nil {
		return in, err
	}
	os.RemoveAll(old)
	if err := writeWrapper(in.Wrapper, c.Self, c.Pin, t, in.Dir); err != nil {
		return in, err
	}
	return in, nil
}

// writeWrapper writes DIR/bin/<tool>: a script run by cure-tools (the
// kernel passes `run` and the script's path, then the arguments).
func writeWrapper(p, self string, pin *toolbundle.Pin, t toolbundle.PinTool, dir string) error {
	argv, err := Command(filepath.Dir(filepath.Dir(p)), pin, t.Name, nil)
	if err != nil {
		return err
	}
	body := fmt.Sprintf("#!%s run\n# %s from the CURE tool bundle %.12s (%s %s), unpacked in %s by cure-tools fetch.\n# cure-tools run execs: %s ARGS...\n",
		self, t.Name, pin.SHA256, t.Package, t.Version, dir, strings.Join(argv, " "))
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Command is the argv that runs an unpacked tool: name is a tool of the
// pin or the path of its wrapper (DIR/bin/<tool>, whose DIR it is then
// under; dir is used for a bare name). A tool unpacked with the bundle's
// loader runs through it, with the bundle's lib/ as its only library path
// (the image's libraries are never used); a static one runs as is.
func Command(dir string, pin *toolbundle.Pin, name string, args []string) ([]string, error) {
	if strings.Contains(name, "/") {
		dir = filepath.Dir(filepath.Dir(name))
		name = filepath.Base(name)
	}
	if _, ok := pin.Tool(name); !ok {
		return nil, fmt.Errorf("the tool bundle has no %q (it has %s)", name, strings.Join(pin.Names(), ", "))
	}
	tdir := filepath.Join(dir, name)
	prog := filepath.Join(tdir, "bin", name)
	if _, err := os.Stat(prog); err != nil {
		return nil, fmt.Errorf("%s is not fetched (no %s): run `cure-tools fetch %s` first", name, prog, name)
	}
	if pin.Loader != "" {
		loader := filepath.Join(tdir, filepath.FromSlash(pin.Loader))
		if _, err := os.Stat(loader); err == nil {
			return append([]string{loader, "--library-path", filepath.Join(tdir, "lib"), prog}, args...), nil
		}
	}
	return append([]string{prog}, args...), nil
}

// List writes what the pinned bundle offers, and which tools are fetched.
func (c Config) List(w io.Writer) {
	fmt.Fprintf(w, "tool bundle %.12s (%d bytes), pinned by %s:\n", c.Pin.SHA256, c.Pin.Size, c.PinFile)
	nw, pw := 0, 0
	for _, t := range c.Pin.Tools {
		nw, pw = max(nw, len(t.Name)), max(pw, len(t.Package)+1+len(t.Version))
	}
	for _, t := range c.Pin.Tools {
		state := "cure-tools fetch " + t.Name
		if _, err := os.Stat(filepath.Join(c.Dir, "bin", t.Name)); err == nil {
			state = "fetched: " + filepath.Join(c.Dir, "bin", t.Name)
		}
		fmt.Fprintf(w, "  %-*s  %-*s  %3d files %6.1f MB  %s\n", nw, t.Name, pw, t.Package+" "+t.Version, t.Files, float64(t.Bytes)/1e6, state)
	}
	src := "cure.http=" + c.BaseURL
	if c.BaseURL == "" {
		src = "the coordinator (no cure.http= on this kernel command line: pass -http http://HOST:PORT)"
	}
	fmt.Fprintf(w, "fetching downloads the whole bundle from %s into %s, checks it, and unpacks only the named tools.\n", src, c.Dir)
}

func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone() // 30 s connect timeout
	t.ResponseHeaderTimeout = 30 * time.Second
	t.Proxy = nil // the coordinator's artifact server, directly
	return &http.Client{Transport: t}
}
