package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// defaultConfigFile is --config's default; unlike a path given, it may be
// absent (a variable: tests point it elsewhere).
var defaultConfigFile = "/etc/cure/provisioner-lite.yaml"

// coordOpts are the coordinator's flags (and a config show's): the
// library's Config, the repeatable lists, the log and the config file.
type coordOpts struct {
	cfg                         coordinator.Config
	imports, tlsNames, webhooks multiFlag
	logLevel                    slog.Level
	logFormat, configFile       string
}

func newCoordOpts() *coordOpts {
	return &coordOpts{cfg: coordinator.DefaultConfig()}
}

// lists are the repeatable flags: a YAML list in the config file, a
// comma-separated CURE_* variable.
func (o *coordOpts) lists() map[string]*multiFlag {
	return map[string]*multiFlag{"import-artifact": &o.imports, "tls-name": &o.tlsNames, "webhook": &o.webhooks}
}

// bind registers the coordinator's flags on cmd.
func (o *coordOpts) bind(cmd *cobra.Command) {
	gfs := flag.NewFlagSet(cmd.Name(), flag.ContinueOnError)
	registerFlags(gfs, &o.cfg, &o.imports, &o.tlsNames, &o.webhooks)
	gfs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "`level` of the log: debug, info, warn or error (debug adds every request, DHCP packet and Redfish call)")
	f := cmd.Flags()
	f.AddGoFlagSet(gfs)
	f.StringVar(&o.logFormat, "log-format", "text", "`format` of the log on stderr: text (key=value) or json (one object a line)")
	f.StringVar(&o.configFile, "config", defaultConfigFile, "YAML `file` of flag values, keys the flag names (repeatable flags as lists); "+
		"CURE_<FLAG> variables and flags override it; only the default path may be absent")
	cmd.MarkFlagFilename("config", "yaml", "yml")
	for _, name := range []string{"state-dir", "manifests", "image-dir", "ipxe-dir", "ek-roots"} {
		cmd.MarkFlagDirname(name)
	}
	cmd.MarkFlagFilename("nodes", "yaml", "yml", "csv")
	for _, name := range []string{"import-artifact", "bmc-ca", "tool-bundle", "webhook-secret-file"} {
		cmd.MarkFlagFilename(name)
	}
}

// config is the coordinator.Config the flags describe.
func (o *coordOpts) config() coordinator.Config {
	c := o.cfg
	c.ImportArtifacts = o.imports
	c.TLSNames = o.tlsNames
	c.Webhooks = o.webhooks
	c.EventLimits.HardEvents = c.EventLimits.MaxEvents + store.DefaultEventLimits.HardEvents - store.DefaultEventLimits.MaxEvents
	c.Retention.BootTokens = store.DefaultRetention.BootTokens
	return c
}

// configurable reports whether a flag may come from the file or the
// environment (--config only from the environment: CURE_CONFIG); config
// show's -o is no coordinator flag.
func configurable(name string) bool {
	switch name {
	case "help", "version", "config", "output":
		return false
	}
	return true
}

// envName is the variable that sets a flag: CURE_STATE_DIR for --state-dir.
func envName(flag string) string {
	return "CURE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// resolve sets the flags the command line left alone, from their CURE_*
// variables, then from the config file: a flag beats its variable, which
// beats the file, which beats the default. It returns where each flag's
// value came from (absent: the default).
func (o *coordOpts) resolve(fset *pflag.FlagSet, env func(string) (string, bool)) (map[string]string, error) {
	src := map[string]string{}
	fset.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			src[f.Name] = "flag"
		}
	})
	path, explicit := o.configFile, src["config"] != ""
	if v, ok := env(envName("config")); ok && v != "" && !explicit {
		path, explicit, src["config"] = v, true, "env "+envName("config")
	}
	o.configFile = path
	settings, err := readConfigFile(path, explicit)
	if err != nil {
		return nil, err
	}
	if err := o.checkKeys(fset, path, settings); err != nil {
		return nil, err
	}
	var errs []error
	fset.VisitAll(func(f *pflag.Flag) {
		v, ok := env(envName(f.Name))
		if src[f.Name] != "" || !configurable(f.Name) || !ok || v == "" {
			return
		}
		values := []string{v}
		if o.lists()[f.Name] != nil {
			values = strings.Split(v, ",")
		}
		for _, item := range values {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			if err := f.Value.Set(item); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s: %q: %w (--%s)", envName(f.Name), item, err, f.Name))
			}
		}
		src[f.Name] = "env " + envName(f.Name)
	})
	for _, s := range settings {
		if src[s.key] != "" {
			continue
		}
		f := fset.Lookup(s.key)
		for _, v := range s.values {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %q: %w", path, s.line, s.key, v, err))
			}
		}
		src[s.key] = fmt.Sprintf("file %s:%d", path, s.line)
	}
	return src, errors.Join(errs...)
}

// checkKeys refuses a key that names no flag, and a list for a flag that
// takes one value.
func (o *coordOpts) checkKeys(fset *pflag.FlagSet, path string, settings []setting) error {
	var errs []error
	for _, s := range settings {
		f := fset.Lookup(s.key)
		switch {
		case f == nil || !configurable(s.key):
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q: the keys are the coordinator's flag names (provisioner-lite --help)", path, s.line, s.key))
		case s.list && o.lists()[s.key] == nil:
			errs = append(errs, fmt.Errorf("%s:%d: %s: a list, but --%s takes one value (lists are for import-artifact, tls-name, webhook)", path, s.line, s.key, s.key))
		}
	}
	return errors.Join(errs...)
}

// setting is one key of the config file.
type setting struct {
	key    string
	values []string
	line   int
	list   bool
}

// readConfigFile reads the config file's settings; the default path may
// be absent, a path given must not.
func readConfigFile(path string, explicit bool) ([]setting, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return parseConfig(path, data)
}

// parseConfig reads a config file: one YAML mapping of flag names to a
// value (a scalar) or, for a repeatable flag, a list of them.
func parseConfig(path string, data []byte) ([]setting, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return nil, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, m.Line)
	}
	var out []setting
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: a key must be a flag name", path, k.Line)
		}
		if first, dup := seen[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: %s given twice (first at line %d)", path, k.Line, k.Value, first)
		}
		seen[k.Value] = k.Line
		s := setting{key: k.Value, line: k.Line}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			s.list, items = true, v.Content
		}
		for _, it := range items {
			if it.Kind == yaml.AliasNode && it.Alias != nil {
				it = it.Alias
			}
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
				return nil, fmt.Errorf("%s:%d: %s: want a value (or, for a repeatable flag, a list of values)", path, it.Line, k.Value)
			}
			s.values = append(s.values, it.Value)
		}
		out = append(out, s)
	}
	return out, nil
}
