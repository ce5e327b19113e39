package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cure-oss/cure/provisioner-lite/backup"
)

func init() { subcommands["restore"] = runRestore }

const restoreUsage = `usage: provisioner-lite restore --in FILE --state-dir DIR [--db DSN] [--force]

Restores a backup (provisioner-lite backup) into DIR and, for a PostgreSQL
backup, the database --db. Every member's sha256 is checked against the
archive's manifest before anything is changed. DIR must be absent or empty and
the database empty, unless --force: then DIR is moved aside (DIR.replaced-TIME)
and the database's tables are dropped. A DIR a running coordinator holds is
always refused. A backup of an older schema is migrated on the way; one newer
than this binary is refused, naming both versions.
Exit codes: 0 restored, 1 refused or failed, 2 usage.
`

// runRestore is `provisioner-lite restore`.
func runRestore(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	in := fs.String("in", "", "the archive")
	stateDir := fs.String("state-dir", "", "the state dir to restore into (absent or empty)")
	dsn := fs.String("db", "", "the PostgreSQL database to restore into (empty); empty for a SQLite backup")
	force := fs.Bool("force", false, "restore over a non-empty state dir (moved aside) and database (its tables dropped)")
	err := fs.Parse(args)
	if err == flag.ErrHelp {
		fmt.Fprint(out, restoreUsage)
		return 0
	}
	if err != nil || fs.NArg() > 0 || *in == "" || *stateDir == "" {
		if err != nil {
			fmt.Fprintln(os.Stderr, "restore:", err)
		}
		fmt.Fprint(os.Stderr, restoreUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := backup.Restore(ctx, backup.RestoreOptions{In: *in, StateDir: *stateDir, DSN: *dsn, Force: *force, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "provisioner-lite:", err)
		return 1
	}
	m := res.Manifest
	fmt.Fprintf(out, "restored %s (taken %s by CURE %s) into %s and %s\n", *in, m.Created.Format("2006-01-02 15:04:05Z"), m.CUREVersion, *stateDir, dsnLabel(*dsn))
	if res.Store.Schema != m.Schema {
		fmt.Fprintf(out, "the store was migrated from schema version %d to %d\n", m.Schema, res.Store.Schema)
	}
	if res.MovedTo != "" {
		fmt.Fprintf(out, "the state dir that was there is now %s\n", res.MovedTo)
	}
	return 0
}
