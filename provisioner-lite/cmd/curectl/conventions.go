package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// outputHelp is what the root help says of -o: one shape per command,
// the API's own message, so scripts can rely on it.
const outputHelp = `Output: every command that prints takes -o json|yaml. The document is the
API message the command received (api/curev1/cure.proto in protojson form,
every field present, camelCase names): provision a ProvisionResponse,
cancel a CancelResponse, report a RunReport, audit an AuditDirectResponse,
nodes list a ListNodesResponse, nodes show and nodes label a NodeDetail,
nodes add and import an AddNodesResponse, nodes remove a
RemoveNodeResponse, the pool commands a PoolResponse, audit-log a
ListAuditLogResponse, buckets a TimeBucketSummary, fleet-bands a
FleetBandsResponse, manifests a ListManifestsResponse, nodes discovered a ListDiscoveredResponse,
nodes approve an ApproveDiscoveredResponse. watch streams: one compact JSON object per line (YAML:
one document each): a TimelineEntry per event of one run, a FleetRun per
node and refresh for several nodes, a FleetStatus per refresh of --fleet.`

// exitCodesCommon are the exit codes of a command that lists no others.
const exitCodesCommon = `Exit codes:
  0  done
  1  failed: the coordinator refused the request or could not be reached
  2  bad usage (flags, arguments)`

// documentExitCodes gives every command's help an "Exit codes" section: the
// common one unless the command documents its own.
func documentExitCodes(c *cobra.Command) {
	if !strings.Contains(c.Long, "Exit codes:") {
		long := c.Long
		if long == "" {
			long = c.Short
		}
		c.Long = long + "\n\n" + exitCodesCommon
	}
	for _, s := range c.Commands() {
		documentExitCodes(s)
	}
}

// addOutputFlag registers -o/--output with the formats a command prints,
// completed by the shell.
func addOutputFlag(cmd *cobra.Command, p *string, formats ...string) {
	cmd.Flags().StringVarP(p, "output", "o", "", strings.Join(formats, "|")+" (json, yaml: the API's message, as curectl --help says under Output)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
}

// Log formats of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

// logFormat is the --log-format of the running command (run sets it).
var logFormat = logText

// setLogFormat checks --log-format and points slog's default at stderr in it.
func setLogFormat(f string) error {
	switch f {
	case logText, logJSON:
	default:
		return fmt.Errorf("--log-format %q: want text or json", f)
	}
	logFormat = f
	slog.SetDefault(slog.New(logHandler()))
	return nil
}

func logHandler() slog.Handler {
	if logFormat == logJSON {
		return slog.NewJSONHandler(os.Stderr, nil)
	}
	return slog.NewTextHandler(os.Stderr, nil)
}

// stderr is where curectl writes its errors, notes and prompts: stderr as
// it is, or with --log-format json each line as a JSON log record. It is
// looked up at each call (tests swap os.Stderr).
func stderr() io.Writer {
	if logFormat == logJSON {
		return jsonLines{}
	}
	return os.Stderr
}

// jsonLines turns each line written to it into one JSON record on stderr:
// level ERROR for curectl's own "curectl CMD: ..." error lines, INFO for
// the rest (progress, prompts, notes).
type jsonLines struct{}

func (jsonLines) Write(p []byte) (int, error) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		level := slog.LevelInfo
		if strings.HasPrefix(line, "curectl") {
			level = slog.LevelError
		}
		log.Log(context.Background(), level, line)
	}
	return len(p), nil
}

// logExit is the last record of a JSON log: the exit code.
func logExit(rc int) {
	if logFormat != logJSON {
		return
	}
	level := slog.LevelInfo
	if rc != 0 {
		level = slog.LevelError
	}
	slog.New(logHandler()).Log(context.Background(), level, "exit", "rc", rc)
}

// diagWriter is cobra's error stream: stderr() at each write.
type diagWriter struct{}

func (diagWriter) Write(p []byte) (int, error) { return stderr().Write(p) }
