package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SharedConfig runs the instances as several behind one address do: the
// manifests from one bundle in the store, the OS image held by some
// instances only (the others fetch it from a peer or the mirror), a
// network boot front door (TFTP here: proxy DHCP's ports need root) that
// one instance answers at a time, and more than one instance killed.
type SharedConfig struct {
	// ManifestsFromStore pushes the sim's manifests into the database
	// (provisioner-lite manifests push) and starts every instance with
	// --manifests-from-store.
	ManifestsFromStore bool
	// ImageHolders, if not nil, are the instances the OS image is imported
	// into; the others fetch it on their first need.
	ImageHolders []int
	// Mirror is passed as --artifact-mirror to every instance ("": none).
	Mirror string
	// FrontDoor gives each instance a TFTP listener (TFTPAddr) over fake
	// iPXE builds: every instance runs the front door, and the front
	// door's lease decides which one answers.
	FrontDoor bool
	// Kill lists the instances KillAfter kills for good (default: 0).
	Kill []int
}

// Instance is one coordinator instance as a test addresses it.
type Instance struct {
	Name, HTTPBase, MetricsAddr, TFTPAddr string
	Dead                                  bool
}

// Instances lists the instances in order.
func (s *Sim) Instances() []Instance {
	s.coordMu.Lock()
	defer s.coordMu.Unlock()
	var out []Instance
	for _, c := range s.coords {
		out = append(out, Instance{Name: c.name, HTTPBase: c.httpBase, MetricsAddr: c.metricsAddr, TFTPAddr: c.tftpAddr, Dead: c.dead})
	}
	return out
}

// killList is the instances a KillAfter fault kills.
func (s *Sim) killList() []int {
	if len(s.cfg.Shared.Kill) > 0 {
		return s.cfg.Shared.Kill
	}
	return []int{0}
}

// instanceArgs are instance i's flags for the shared configuration.
func (s *Sim) instanceArgs(i int) []string {
	sh, c := s.cfg.Shared, s.coords[i]
	var args []string
	if sh.ManifestsFromStore {
		args = append(args, "--manifests-from-store")
	}
	if sh.ImageHolders != nil && slices.Contains(sh.ImageHolders, i) {
		args = append(args, "--import-artifact", s.imgPath)
	}
	if sh.Mirror != "" {
		args = append(args, "--artifact-mirror", sh.Mirror)
	}
	if c.metricsAddr != "" {
		args = append(args, "--metrics-listen", c.metricsAddr)
	}
	if c.tftpAddr != "" {
		args = append(args, "--tftp-listen", c.tftpAddr, "--ipxe-dir", filepath.Join(s.cfg.Work, "ipxe"))
	}
	return args
}

// prepareShared gives each instance its metrics address and, with
// FrontDoor, its TFTP address and the fake iPXE builds.
func (s *Sim) prepareShared() error {
	if len(s.coords) < 2 {
		return nil
	}
	for _, c := range s.coords {
		p, err := freePort()
		if err != nil {
			return err
		}
		c.metricsAddr = "127.0.0.1:" + strconv.Itoa(p)
		if s.cfg.Shared.FrontDoor {
			if p, err = freePort(); err != nil {
				return err
			}
			c.tftpAddr = "127.0.0.1:" + strconv.Itoa(p)
		}
	}
	if !s.cfg.Shared.FrontDoor {
		return nil
	}
	dir := filepath.Join(s.cfg.Work, "ipxe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{"undionly.kpxe", "snponly.efi"} {
		if err := writeRandom(filepath.Join(dir, name), 96<<10); err != nil {
			return err
		}
	}
	return nil
}

// pushManifests stores the sim's manifests as a bundle with the real
// command, as an operator would.
func (s *Sim) pushManifests() error {
	if !s.cfg.Shared.ManifestsFromStore {
		return nil
	}
	if s.cfg.DSN == "" {
		return errors.New("fleet: ManifestsFromStore needs the PostgreSQL DSN")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.cfg.Bin, "manifests", "push", "--db", s.cfg.DSN, "--by", "fleet", s.manDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("manifests push: %v\n%s", err, out)
	}
	return nil
}

// waitFrontDoor waits until instance i says (its metrics) that it holds
// the front door's lease: the first instance started takes it before the
// others start, so a test knows which one answers.
func (s *Sim) waitFrontDoor(ctx context.Context, i int) error {
	c := s.coords[i]
	if !s.cfg.Shared.FrontDoor || c.metricsAddr == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if held, _ := FrontDoorHeld(ctx, c.metricsAddr); held {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never took the front door's lease: %w", c.name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FrontDoorHeld reads cure_front_door_held from an instance's metrics.
func FrontDoorHeld(ctx context.Context, metricsAddr string) (bool, error) {
	v, err := MetricValue(ctx, metricsAddr, "cure_front_door_held")
	return v == 1, err
}

// MetricValue reads one unlabelled metric from an instance's /metrics.
func MetricValue(ctx context.Context, metricsAddr, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", metricsAddr, name)
}
