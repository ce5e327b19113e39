package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/spf13/cobra"
)

// pkiCmd creates the CA and, with --operator, issues (or reuses) that
// operator's client certificate for curectl.
func (a *app) pkiCmd() *cobra.Command {
	var stateDir, operator, roleName, logFormat string
	cmd := &cobra.Command{
		Use:   "pki --state-dir DIR [--operator NAME --role viewer|operator|admin]",
		Short: "The CA, and one operator's curectl certificate",
		Long: `Create the state dir's CA, Secure Boot certificate and boot CA if absent and,
with --operator, issue (or reuse) that operator's client certificate for curectl.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := newLogger(a.errOut, logFormat, nil); err != nil {
				return err
			}
			role, err := pki.ParseRole(roleName)
			if err != nil {
				return err
			}
			return a.pki(stateDir, operator, role)
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "state", "state directory")
	f.StringVar(&operator, "operator", "", "also issue (or reuse) the curectl client certificate of this operator (CN; e.g. a login name)")
	f.StringVar(&roleName, "role", string(pki.RoleViewer), "the operator's role: viewer (read), operator (provision, audit, verify, diagnostic, burn-in) or admin (also wipe)")
	cmd.MarkFlagDirname("state-dir")
	cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{string(pki.RoleViewer), string(pki.RoleOperator), string(pki.RoleAdmin)}, cobra.ShellCompDirectiveNoFileComp))
	logFormatFlag(cmd, &logFormat)
	cmd.AddCommand(a.pkiOfflineCmd())
	return cmd
}

func (a *app) pki(stateDir, operator string, role pki.Role) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return a.fail(1, "pki", err)
	}
	pkiDir := filepath.Join(stateDir, "pki")
	ca, err := pki.EnsureCA(pkiDir)
	if err != nil {
		return a.fail(1, "pki", err)
	}
	fmt.Fprintf(a.out, "%s (%d bytes)\n", filepath.Join(pkiDir, pki.CACertFile), len(ca))
	sbCert, sbOffline, err := pki.EnsureSecureBootCert(pkiDir)
	if err != nil {
		return a.fail(1, "pki", err)
	}
	where := ""
	if sbOffline {
		where = "; its key is kept offline"
	}
	fmt.Fprintf(a.out, "%s (Secure Boot signing certificate: enrol it in the nodes' db%s)\n", sbCert, where)
	if _, err := pki.EnsureBootCA(pkiDir); err != nil {
		return a.fail(1, "pki", err)
	}
	fmt.Fprintf(a.out, "%s, %s (HTTPS boot CA: enrol it in the nodes' firmware)\n", filepath.Join(pkiDir, pki.BootCACertFile), filepath.Join(pkiDir, pki.BootCAESLFile))
	if operator == "" {
		return nil
	}
	oc, err := pki.IssueOperatorCert(pkiDir, operator, role)
	if err != nil {
		return a.fail(1, "pki", err)
	}
	what := "reused"
	if oc.Issued {
		what = "issued"
	}
	fmt.Fprintf(a.out, "operator %s (%s): certificate %s, key %s (%s, valid until %s)\n", oc.Name, oc.Role, oc.CertFile, oc.KeyFile, what, oc.NotAfter.Format(time.DateOnly))
	fmt.Fprintf(a.out, "use: curectl --ca %s --cert %s --key %s ...\n", filepath.Join(pkiDir, pki.CACertFile), oc.CertFile, oc.KeyFile)
	return nil
}
