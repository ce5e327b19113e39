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
	"github.com/cure-oss/cure/provisioner-lite/store"
)

func init() { subcommands["backup"] = runBackup }

const backupUsage = `usage: provisioner-lite backup --state-dir DIR [--db DSN] --out FILE

An online, consistent copy of a coordinator while it runs (it takes no lock):
the store (SQLite: a VACUUM INTO snapshot of DIR/cure.db; PostgreSQL with --db:
every table dumped in one REPEATABLE READ transaction) and the state dir (the
state key, the PKI, the artifact store; never the lock), as one tar.zst ending
with a manifest (format, CURE and schema versions, each member's sha256).
FILE is written 0600 and holds the state key and the CA key: keep it as secret
as the state dir. --state-dir and --db default to $CURE_STATE_DIR and $CURE_DB.
Exit codes: 0 written, 1 the backup failed (nothing left at FILE), 2 usage.
`

// runBackup is `provisioner-lite backup`.
func runBackup(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	stateDir := fs.String("state-dir", os.Getenv("CURE_STATE_DIR"), "the running coordinator's state dir")
	dsn := fs.String("db", os.Getenv("CURE_DB"), "its PostgreSQL DSN (empty: the SQLite store in the state dir)")
	outFile := fs.String("out", "", "the archive to write (must not exist)")
	err := fs.Parse(args)
	if err == flag.ErrHelp {
		fmt.Fprint(out, backupUsage)
		return 0
	}
	if err != nil || fs.NArg() > 0 || *stateDir == "" || *outFile == "" {
		if err != nil {
			fmt.Fprintln(os.Stderr, "backup:", err)
		}
		fmt.Fprint(os.Stderr, backupUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := backup.Backup(ctx, backup.Options{StateDir: *stateDir, DSN: *dsn, Out: *outFile, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "provisioner-lite:", err)
		return 1
	}
	m := sum.Manifest
	fmt.Fprintf(out, "backup %s: %d members, %d bytes; %s store at schema version %d; written by CURE %s\n",
		*outFile, len(m.Members), sum.Bytes, m.Database, m.Schema, m.CUREVersion)
	fmt.Fprintln(out, "it holds the state key and the CA key: keep it as secret as the state dir")
	return 0
}

// dsnLabel is a DSN for messages: redacted, or the state dir's SQLite.
func dsnLabel(dsn string) string {
	if dsn == "" {
		return "the SQLite store in the state dir"
	}
	return store.Redacted(dsn)
}
