package optools

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
)

// OnDemand runs, for the runner, the tools the image leaves to the tool
// bundle (mstflint and its 9 MB of C++ and OpenSSL libraries, which only
// nodes with ConnectX or BlueField adapters ever call): a tool on PATH (an
// image built with it) runs as is; one the pin lists is fetched, checked
// against the pin and unpacked on its first use, then runs through the
// bundle's loader. A failed fetch is tried again at the next use. Its Run
// and LookPath fit tools/mstflint's Runner and LookPath seams.
type OnDemand struct {
	Config Config

	mu      sync.Mutex
	fetched map[string]bool
}

// LookPath says where name will run from without fetching anything: PATH,
// or the wrapper it gets once fetched.
func (o *OnDemand) LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if o.Config.Pin != nil {
		if _, ok := o.Config.Pin.Tool(filepath.Base(name)); ok {
			return filepath.Join(o.Config.Dir, "bin", filepath.Base(name)), nil
		}
	}
	return "", fmt.Errorf("%s is neither in this image nor in the tool bundle it pins (%s)", name, o.Config.PinFile)
}

// Command is the argv that runs name with args, fetching the tool first
// when it is the bundle's and not fetched yet.
func (o *OnDemand) Command(ctx context.Context, name string, args ...string) ([]string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return append([]string{p}, args...), nil
	}
	if o.Config.Pin == nil {
		return nil, fmt.Errorf("%s is not in this image, and the image pins no tool bundle", name)
	}
	name = filepath.Base(name)
	if err := o.fetch(ctx, name); err != nil {
		return nil, err
	}
	return Command(o.Config.Dir, o.Config.Pin, name, args)
}

// Run runs name (see Command) and returns its output; ctx kills it.
func (o *OnDemand) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	argv, err := o.Command(ctx, name, args...)
	if err != nil {
		return nil, nil, err
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

func (o *OnDemand) fetch(ctx context.Context, name string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fetched[name] {
		return nil
	}
	p, err := o.Config.MakePlan([]string{name})
	if err != nil {
		return err
	}
	if _, err := o.Config.Fetch(ctx, p); err != nil {
		return fmt.Errorf("fetching %s from the tool bundle: %w", name, err)
	}
	if o.fetched == nil {
		o.fetched = map[string]bool{}
	}
	o.fetched[name] = true
	return nil
}
