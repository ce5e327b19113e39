package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/spf13/cobra"
)

// checkCmd is `provisioner-lite check args...` printing to out, its exit
// code.
func checkCmd(args []string, out io.Writer) int {
	return execute(append([]string{"check"}, args...), out, os.Stderr)
}

// checkOpts are check's flags.
type checkOpts struct {
	manifestDir, nodesFile, stateDir, imageDir, format, logFormat string
}

// checkCommand lints the site's configuration as the coordinator reads it
// at start: 0 when clean, 1 with every problem listed, 2 for bad usage.
func (a *app) checkCmd() *cobra.Command {
	var o checkOpts
	cmd := &cobra.Command{
		Use:   "check [--manifests DIR] [--nodes FILE] [--state-dir DIR [--image-dir DIR]] [-o json|yaml]",
		Short: "Lint the manifests, suites and nodes file as the coordinator will read them",
		Long: `Lint the manifests, suites and nodes file as the coordinator will read them at
start; with --state-dir, that the SKUs' OS images are in its artifact store;
with --image-dir too, that the image trusts the state dir's CA.
Each problem is one line "file:line[:col]: field: message" (-o json|yaml: a
list of {file, line, column, field, message}).

Exit codes:
  0  no problems
  1  problems, every one listed
  2  usage error: an unknown flag, an argument, --image-dir without --state-dir`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.check(o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.manifestDir, "manifests", "manifests/examples", "directory of SKU manifests and suites/, as the coordinator's --manifests")
	f.StringVar(&o.nodesFile, "nodes", "", "node inventory (YAML or CSV), as the coordinator's --nodes")
	f.StringVar(&o.stateDir, "state-dir", "", "the coordinator's state dir: check that the SKUs' OS images are in its artifact store (and, with --image-dir, that the image trusts its CA)")
	f.StringVar(&o.imageDir, "image-dir", "", "with --state-dir: the cure-build output to check")
	cmd.MarkFlagDirname("manifests")
	cmd.MarkFlagFilename("nodes", "yaml", "yml", "csv")
	cmd.MarkFlagDirname("state-dir")
	cmd.MarkFlagDirname("image-dir")
	outputFlag(cmd, &o.format, "text", "text (one problem a line), json or yaml (a structured report)")
	logFormatFlag(cmd, &o.logFormat)
	return cmd
}

// checkReport is check's -o json|yaml.
type checkReport struct {
	Manifests string    `json:"manifests" yaml:"manifests"`
	SKUs      []string  `json:"skus" yaml:"skus"`
	Suites    []string  `json:"suites" yaml:"suites"`
	NodesFile string    `json:"nodes_file,omitempty" yaml:"nodes_file,omitempty"`
	Nodes     *int      `json:"nodes,omitempty" yaml:"nodes,omitempty"` // absent when the file was not read
	StateDir  string    `json:"state_dir,omitempty" yaml:"state_dir,omitempty"`
	ImageDir  string    `json:"image_dir,omitempty" yaml:"image_dir,omitempty"`
	ImageCA   string    `json:"image_ca_fingerprint,omitempty" yaml:"image_ca_fingerprint,omitempty"`
	OK        bool      `json:"ok" yaml:"ok"`
	Problems  []problem `json:"problems" yaml:"problems"`
}

// problem is one of check's problems, its location parsed out.
type problem struct {
	File    string `json:"file,omitempty" yaml:"file,omitempty"`
	Line    int    `json:"line,omitempty" yaml:"line,omitempty"`
	Column  int    `json:"column,omitempty" yaml:"column,omitempty"`
	Field   string `json:"field,omitempty" yaml:"field,omitempty"`
	Message string `json:"message" yaml:"message"`
}

// problemLine is sitecheck's "file:line[:col]: field: message".
var problemLine = regexp.MustCompile(`^(.+?):(\d+)(?::(\d+))?: (?:([A-Za-z_][A-Za-z0-9_.\[\]-]*): )?(.*)$`)

func parseProblem(s string) problem {
	m := problemLine.FindStringSubmatch(s)
	if m == nil {
		return problem{Message: s}
	}
	p := problem{File: m[1], Field: m[4], Message: m[5]}
	p.Line, _ = strconv.Atoi(m[2])
	p.Column, _ = strconv.Atoi(m[3])
	return p
}

func (a *app) check(o checkOpts) error {
	if err := checkOutput(o.format, "text", "json", "yaml"); err != nil {
		return err
	}
	if _, err := newLogger(a.errOut, o.logFormat, nil); err != nil {
		return err
	}
	if o.imageDir != "" && o.stateDir == "" {
		return fmt.Errorf("--image-dir needs --state-dir (the image's CA is checked against the state dir's)")
	}
	res := sitecheck.Site(o.manifestDir, o.nodesFile)
	rep := checkReport{Manifests: o.manifestDir, SKUs: res.SKUs, Suites: res.Suites, NodesFile: o.nodesFile, StateDir: o.stateDir, ImageDir: o.imageDir}
	if o.nodesFile != "" && res.Nodes != nil {
		n := len(res.Nodes)
		rep.Nodes = &n
	}
	if o.stateDir != "" {
		res.Images(o.stateDir)
	}
	if o.imageDir != "" {
		caPEM, err := os.ReadFile(filepath.Join(o.stateDir, "pki", pki.CACertFile))
		if err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: the state dir has no CA (%v): run `provisioner-lite init --state-dir %s`", o.stateDir, err, o.stateDir))
		} else if ca, err := pki.CheckImageCA(o.imageDir, caPEM, o.stateDir); err != nil {
			res.Problems = append(res.Problems, err.Error())
		} else {
			rep.ImageCA = ca.Fingerprint
		}
	}
	if !res.OK() {
		a.rc = 1
	}
	if o.format != "text" {
		rep.OK, rep.Problems = res.OK(), []problem{}
		for _, p := range res.Problems {
			rep.Problems = append(rep.Problems, parseProblem(p))
		}
		return emit(a.out, o.format, rep)
	}
	rep.printText(a.out, res.Problems)
	return nil
}

func (rep *checkReport) printText(out io.Writer, problems []string) {
	fmt.Fprintf(out, "manifests %s: %d SKU(s) %v, %d suite(s) %v\n", rep.Manifests, len(rep.SKUs), rep.SKUs, len(rep.Suites), rep.Suites)
	if rep.Nodes != nil {
		fmt.Fprintf(out, "nodes %s: %d node(s)\n", rep.NodesFile, *rep.Nodes)
	} else if rep.NodesFile != "" {
		fmt.Fprintf(out, "nodes %s: not read (see below)\n", rep.NodesFile)
	}
	if rep.ImageCA != "" {
		fmt.Fprintf(out, "image %s: trusts %s's CA (%s)\n", rep.ImageDir, rep.StateDir, rep.ImageCA)
	}
	if len(problems) == 0 {
		fmt.Fprintln(out, "check: no problems")
		return
	}
	for _, p := range problems {
		fmt.Fprintln(out, p)
	}
	fmt.Fprintf(out, "check: %d problem(s)\n", len(problems))
}
