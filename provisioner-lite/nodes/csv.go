package nodes

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// csvRequired are the columns every CSV inventory has (any order).
var csvRequired = []string{"id", "bmc_url", "bmc_username", "bmc_password", "macs", "sku", "hostname", "serial"}

// csvOptional are the columns a CSV inventory may add, each the YAML
// field of the same meaning: bmc_password_env and bmc_password_file replace
// bmc_password (leave it empty), bmc_ca_file, bmc_fingerprint and
// bmc_insecure (true/false, empty = false) set how the BMC's TLS is checked;
// labels (k=v;k2=v2) and psids (SERIAL=PSID;...) are the YAML maps.
var csvOptional = []string{"bmc_password_env", "bmc_password_file", "bmc_ca_file", "bmc_fingerprint", "bmc_insecure", "labels", "psids", "ek_sha256"}

// csvColumn names the CSV column of a YAML bmc field ("" = the password choice).
var csvColumn = map[string]string{
	"": "bmc_password", "url": "bmc_url", "password": "bmc_password", "passwordEnv": "bmc_password_env",
	"passwordFile": "bmc_password_file", "caFile": "bmc_ca_file", "fingerprint": "bmc_fingerprint", "insecure": "bmc_insecure",
}

// ParseCSV parses a CSV inventory with the header
// id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial and any of the
// csvOptional columns (macs separated by ';'; lines starting with '#' are
// comments). The fields mean what ParseYAML's do, under the same rules.
// name is used in error messages (file:line:col: column: problem). All
// problems found are reported, joined.
func ParseCSV(name string, data []byte, opts ...Option) ([]store.Node, error) {
	o := newOptions(opts)
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.TrimLeadingSpace = true
	col, err := csvHeader(name, r)
	if err != nil {
		return nil, err
	}
	seen := newSeen()
	var out []store.Node
	var errs []error
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			// csv.ParseError carries line and column already; wrong field counts land here.
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				continue
			}
			break
		}
		row := &csvRow{name: name, r: r, col: col, rec: rec}
		n := row.node(o, seen)
		if len(row.errs) == 0 {
			out = append(out, n)
		}
		errs = append(errs, row.errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no nodes after the header", name)
	}
	return out, nil
}

// csvHeader reads the header line: each column's index, every column known
// and none twice, the required ones all there.
func csvHeader(name string, r *csv.Reader) (map[string]int, error) {
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty file: want the header %s", name, strings.Join(csvRequired, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	col := map[string]int{}
	var errs []error
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) // spreadsheet exports start with a BOM
		line, c := r.FieldPos(i)
		if _, dup := col[h]; dup {
			errs = append(errs, fmt.Errorf("%s:%d:%d: header: duplicate column %s", name, line, c, quote(h)))
			continue
		}
		if !isCSVColumn(h) {
			errs = append(errs, fmt.Errorf("%s:%d:%d: header: unknown column %s (want %s and optionally %s)", name, line, c, quote(h), strings.Join(csvRequired, ","), strings.Join(csvOptional, ",")))
			continue
		}
		col[h] = i
	}
	for _, h := range csvRequired {
		if _, ok := col[h]; !ok {
			errs = append(errs, fmt.Errorf("%s:1: header: missing column %q", name, h))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return col, nil
}

// csvRow is the data line just read: its fields by column, and the errors
// found in it, each placed at its line and column.
type csvRow struct {
	name string
	r    *csv.Reader // positions are those of its latest record: this row
	col  map[string]int
	rec  []string
	errs []error
}

func (w *csvRow) get(c string) string {
	if i, ok := w.col[c]; ok {
		return strings.TrimSpace(w.rec[i])
	}
	return ""
}

func (w *csvRow) at(c string) string {
	line, cc := w.r.FieldPos(w.col[c])
	return fmt.Sprintf("%s:%d:%d: %s", w.name, line, cc, c)
}

func (w *csvRow) bad(c string, err error) {
	w.errs = append(w.errs, fmt.Errorf("%s: %w", w.at(c), err))
}

// node is the row's node, every field checked (errors in w.errs).
func (w *csvRow) node(o options, seen *seen) store.Node {
	n := store.Node{
		ID: w.get("id"), BMCURL: w.get("bmc_url"), BMCUser: w.get("bmc_username"),
		SKU: w.get("sku"), Hostname: w.get("hostname"), SystemSerial: w.get("serial"),
	}
	if err := checkID(n.ID); err != nil {
		w.bad("id", err)
	} else if err := seen.id(n.ID, w.at("id")); err != nil {
		w.bad("id", err)
	}
	if err := checkBMCURL(n.BMCURL); err != nil {
		w.bad("bmc_url", err)
	}
	if n.EKSHA256 = w.get("ek_sha256"); n.EKSHA256 != "" {
		if err := CheckEKSHA256(n.EKSHA256); err != nil {
			w.bad("ek_sha256", err)
		}
	}
	if n.BMCUser == "" {
		w.bad("bmc_username", errors.New("required"))
	}
	w.bmc(&n)
	if err := checkHostname(n.Hostname); err != nil {
		w.bad("hostname", err)
	}
	if err := o.checkSKU(n.SKU); err != nil {
		w.bad("sku", err)
	}
	var mapErr error
	if n.Labels, mapErr = csvMap(w.get("labels"), CheckLabel); mapErr != nil {
		w.bad("labels", mapErr)
	}
	if n.PSIDs, mapErr = csvMap(w.get("psids"), checkPSID); mapErr != nil {
		w.bad("psids", mapErr)
	}
	n.MACs = w.macs(n.ID, seen)
	return n
}

// bmc sets the node's BMC credentials and trust from the row's bmc_ columns.
func (w *csvRow) bmc(n *store.Node) {
	b := bmcFields{url: n.BMCURL, password: w.get("bmc_password"), passwordEnv: w.get("bmc_password_env"),
		passwordFile: w.get("bmc_password_file"), caFile: w.get("bmc_ca_file"), fingerprint: w.get("bmc_fingerprint")}
	if v := w.get("bmc_insecure"); v != "" {
		var err error
		if b.insecure, err = strconv.ParseBool(v); err != nil {
			w.bad("bmc_insecure", fmt.Errorf("%s: want true or false", quote(v)))
		}
	}
	for _, fe := range b.apply(filepath.Dir(w.name), n) {
		w.bad(csvColumn[fe.field], fe.err)
	}
}

// macs are the row's boot MACs (";"-separated, at least one), normalised,
// none another node's.
func (w *csvRow) macs(id string, seen *seen) []string {
	rawMACs := w.get("macs")
	if rawMACs == "" {
		w.bad("macs", errors.New("required: at least one MAC the node PXE-boots from"))
	}
	var macs []string
	for i, m := range strings.Split(rawMACs, ";") {
		m = strings.TrimSpace(m)
		if m == "" && rawMACs == "" {
			break
		}
		nm, err := store.NormalizeMAC(m)
		if err != nil {
			w.bad("macs", fmt.Errorf("entry %d: %w", i+1, err))
			continue
		}
		if err := seen.mac(nm, id, w.at("macs")); err != nil {
			w.bad("macs", err)
			continue
		}
		macs = append(macs, nm)
	}
	return macs
}

func isCSVColumn(h string) bool {
	return slices.Contains(csvRequired, h) || slices.Contains(csvOptional, h)
}

// csvMap reads "k=v;k2=v2" (the CSV form of a YAML map), checking each pair.
func csvMap(s string, check func(k, v string) error) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for i, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return nil, fmt.Errorf("entry %d %s: want key=value (entries separated by ';')", i+1, quote(part))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("entry %d: %s given twice", i+1, quote(k))
		}
		if err := check(k, v); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		out[k] = v
	}
	return out, nil
}
