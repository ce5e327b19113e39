package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
)

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
