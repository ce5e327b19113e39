package main

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// configCmd is `provisioner-lite config show`.
func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "The coordinator's configuration: config show",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return fmt.Errorf("config: want a command: show") },
	}
	o := newCoordOpts()
	var format string
	show := &cobra.Command{
		Use:   "show [--config FILE] [flags] [-o yaml|json]",
		Short: "Print the coordinator's effective configuration, secrets redacted",
		Long: `Print the configuration the coordinator would start with: every flag's value
from the command line (the coordinator's own flags), its CURE_<FLAG> variable,
the config file (--config, default ` + defaultConfigFile + `) or its default, in
that order. The YAML output is a config file (each value's source is its
comment); a password in --db and the secret part of a webhook URL are redacted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(format, "yaml", "json"); err != nil {
				return err
			}
			src, err := o.resolve(cmd.Flags(), os.LookupEnv)
			if err != nil {
				return a.fail(2, "config show", err)
			}
			return a.showConfig(cmd.Flags(), o, src, format)
		},
	}
	o.bind(show)
	outputFlag(show, &format, "yaml", "yaml (a config file, each value's source as its comment) or json")
	cmd.AddCommand(show)
	return cmd
}

// showConfig prints every configurable flag's effective value.
func (a *app) showConfig(fset *pflag.FlagSet, o *coordOpts, src map[string]string, format string) error {
	values := map[string]any{}
	doc := &yaml.Node{Kind: yaml.MappingNode}
	doc.HeadComment = "provisioner-lite's effective configuration (config file " + o.configFile + "); secrets redacted"
	var err error
	fset.VisitAll(func(f *pflag.Flag) {
		if !configurable(f.Name) || err != nil {
			return
		}
		v := flagValue(f, o.lists()[f.Name])
		values[f.Name] = v
		var val yaml.Node
		if err = val.Encode(v); err != nil {
			return
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		comment := &val.LineComment
		if val.Kind == yaml.SequenceNode {
			comment = &key.LineComment // a list's comment goes on its key's line
		}
		*comment = cmp.Or(src[f.Name], "default")
		doc.Content = append(doc.Content, key, &val)
	})
	if err != nil {
		return a.fail(1, "config show", err)
	}
	if format == "json" {
		return emit(a.out, format, values)
	}
	return emit(a.out, format, doc)
}

// flagValue is f's value typed for YAML and JSON, redacted.
func flagValue(f *pflag.Flag, list *multiFlag) any {
	if list != nil {
		out := []string{}
		for _, v := range *list {
			out = append(out, redact(f.Name, v))
		}
		return out
	}
	s := f.Value.String()
	switch f.Value.Type() {
	case "bool":
		if b, err := strconv.ParseBool(s); err == nil {
			return b
		}
	case "int", "int64":
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	case "float64":
		if x, err := strconv.ParseFloat(s, 64); err == nil {
			return x
		}
	case "text":
		return strings.ToLower(s) // slog.Level's INFO, as --log-level takes it
	}
	return redact(f.Name, s)
}

// dsnPassword is the password of a key=value PostgreSQL DSN or URL query.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// redact hides the secrets a flag's value may carry: a database
// password, the path and query of a webhook URL (their tokens).
func redact(name, v string) string {
	const hidden = "REDACTED"
	switch name {
	case "db":
		if u, err := url.Parse(v); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), hidden)
				v = u.String()
			}
		}
		return dsnPassword.ReplaceAllString(v, "${1}"+hidden)
	case "webhook":
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return hidden
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return fmt.Sprintf("%s://%s/%s", u.Scheme, u.Host, hidden)
		}
	}
	return v
}
