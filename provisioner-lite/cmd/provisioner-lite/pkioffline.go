package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/spf13/cobra"
)

// pkiOfflineCmd runs on the host that keeps the Secure Boot and boot CA
// keys (docs/KEYS.md): it creates them if absent, issues the HTTPS boot
// listener's certificate for --host, and writes what the coordinator's
// state dir needs (certificates and the listener's key) into --out.
func (a *app) pkiOfflineCmd() *cobra.Command {
	var keys, out, hosts string
	var days int
	cmd := &cobra.Command{
		Use:   "offline --keys DIR --out DIR [--host H[,H...]] [--days N]",
		Short: "On the key host: make the Secure Boot and boot CA keys, issue the HTTPS boot listener's certificate, export certificates",
		Long: `Run on the host that keeps the Secure Boot and boot CA keys (docs/KEYS.md):
make them if absent, issue the HTTPS boot listener's certificate for --host,
and write the certificates and the listener's key to --out, to copy into the
coordinator's STATE/pki/. The keys stay in --keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keys == "" || out == "" || days <= 0 {
				return fmt.Errorf("pki offline: want --keys, --out and a positive --days")
			}
			return a.pkiOffline(keys, out, hosts, days)
		},
	}
	f := cmd.Flags()
	f.StringVar(&keys, "keys", "", "the key host's directory of the Secure Boot key and the boot CA (created 0700, keys made if absent)")
	f.StringVar(&out, "out", "", "the directory to copy into the coordinator's STATE/pki/ (certificates and the listener's key only)")
	f.StringVar(&hosts, "host", "", "comma-separated names and IPs the HTTPS boot listener certificate covers: the coordinator's --advertise (empty: issue none)")
	f.IntVar(&days, "days", int(pki.ListenerValidity/(24*time.Hour)), "the listener certificate's validity in days")
	cmd.MarkFlagDirname("keys")
	cmd.MarkFlagDirname("out")
	return cmd
}

func (a *app) pkiOffline(keys, out, hosts string, days int) error {
	var hostList []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	res, err := pki.OfflineExport(keys, out, hostList, time.Duration(days)*24*time.Hour, time.Now())
	if err != nil {
		return a.fail(1, "pki offline", err)
	}
	for _, f := range res.Files {
		fmt.Fprintln(a.out, f)
	}
	if res.Listener != "" {
		fmt.Fprintf(a.out, "listener certificate for %s valid until %s\n", strings.Join(hostList, ", "), res.NotAfter.UTC().Format(time.DateOnly))
	} else {
		fmt.Fprintln(a.out, "no listener certificate issued (no --host): the coordinator's HTTPS boot listener needs one")
	}
	fmt.Fprintf(a.out, "copy %s/* into the coordinator's STATE/pki/ and restart it; the keys stay in %s (docs/KEYS.md)\n", out, keys)
	return nil
}
