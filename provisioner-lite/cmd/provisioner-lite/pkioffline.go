package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
)

// httpsBootTLS is the HTTPS boot listener's TLS configuration, checked
// before anything serves: an offline-issued listener certificate that
// firmware would refuse stops the start; one expiring within 30 days is
// warned about at every start.
func httpsBootTLS(pkiDir string, c config, log *slog.Logger) (*tls.Config, error) {
	now := time.Now()
	cfg, boot, err := pki.HTTPSTLSConfig(pkiDir, serverHosts(c.advertise, c.tlsNames...), []string{c.advertise}, now)
	if err != nil {
		return nil, err
	}
	if !boot.Offline {
		log.Info("HTTPS boot listener certificate issued by the boot CA's key in the state dir", "not_after", boot.NotAfter.UTC().Format(time.RFC3339))
		return cfg, nil
	}
	if left := boot.NotAfter.Sub(now); left < pki.ListenerRenewWarning {
		log.Warn("the HTTPS boot listener's certificate expires soon: reissue it on the key host (provisioner-lite pki offline --host ...) and copy it here (docs/KEYS.md)",
			"file", boot.File, "not_after", boot.NotAfter.UTC().Format(time.RFC3339), "days_left", int(left.Hours()/24))
	} else {
		log.Info("HTTPS boot listener certificate issued offline", "file", boot.File, "not_after", boot.NotAfter.UTC().Format(time.RFC3339))
	}
	return cfg, nil
}

// pkiOfflineCmd runs on the host that keeps the Secure Boot and boot CA
// keys (docs/KEYS.md): it creates them if absent, issues the HTTPS boot
// listener's certificate for --host, and writes what the coordinator's
// state dir needs (certificates and the listener's key) into --out.
func pkiOfflineCmd(args []string) int {
	fs := flag.NewFlagSet("pki offline", flag.ExitOnError)
	keys := fs.String("keys", "", "the key host's directory of the Secure Boot key and the boot CA (created 0700, keys made if absent)")
	out := fs.String("out", "", "the directory to copy into the coordinator's STATE/pki/ (certificates and the listener's key only)")
	hosts := fs.String("host", "", "comma-separated names and IPs the HTTPS boot listener certificate covers: the coordinator's --advertise (empty: issue none)")
	days := fs.Int("days", int(pki.ListenerValidity/(24*time.Hour)), "the listener certificate's validity in days")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: provisioner-lite pki offline --keys DIR --out DIR [--host H[,H...]] [--days N]")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() > 0 || *keys == "" || *out == "" || *days <= 0 {
		fmt.Fprintf(os.Stderr, "pki offline: want --keys, --out and a positive --days, no arguments (got %q)\n", fs.Args())
		fs.Usage()
		return 2
	}
	var hostList []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	res, err := pki.OfflineExport(*keys, *out, hostList, time.Duration(*days)*24*time.Hour, time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki offline:", err)
		return 1
	}
	for _, f := range res.Files {
		fmt.Println(f)
	}
	if res.Listener != "" {
		fmt.Printf("listener certificate for %s valid until %s\n", strings.Join(hostList, ", "), res.NotAfter.UTC().Format(time.DateOnly))
	} else {
		fmt.Println("no listener certificate issued (no --host): the coordinator's HTTPS boot listener needs one")
	}
	fmt.Printf("copy %s/* into the coordinator's STATE/pki/ and restart it; the keys stay in %s (docs/KEYS.md)\n", *out, *keys)
	return 0
}
