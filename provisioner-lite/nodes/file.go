package nodes

// File is the shape of a YAML nodes file as ParseYAML reads it, written out
// as Go types so the published JSON Schema (manifests/schema,
// nodes.schema.json) is generated from them. ParseYAML walks the YAML
// itself (it reports every problem with its line), so these types are
// never decoded into: a key ParseYAML learns must be added here too, and
// manifests/schema's tests fail until it is.
type File struct {
	// Nodes are the site's nodes. A file may instead be one node's mapping
	// without the list around it (a snippet for `curectl nodes add -f`).
	Nodes []FileNode `yaml:"nodes"`
}

// FileNode is one node of the inventory.
type FileNode struct {
	// ID names the node in every command and URL: 1-63 characters of
	// A-Z a-z 0-9 . _ - starting with a letter or digit.
	ID string `yaml:"id"`
	// BMC is how the coordinator reaches the node's BMC over Redfish.
	BMC FileBMC `yaml:"bmc"`
	// MACs are the MACs the node network-boots from (at least one).
	MACs []string `yaml:"macs"`
	// SKU names the SKU manifest (NAME.yaml in the manifests directory) the
	// node is provisioned to; empty: named at provision time.
	SKU string `yaml:"sku,omitempty"`
	// Hostname is the installed OS's hostname (RFC 1123).
	Hostname string `yaml:"hostname,omitempty"`
	// Serial is the system serial number, checked against the BMC's.
	Serial string `yaml:"serial,omitempty"`
	// PSIDs maps a disk serial to the 32-character PSID printed on its
	// label, for the psid-revert wipe policy.
	PSIDs map[string]string `yaml:"psids,omitempty"`
	// Labels are names selectors use (rack: r12); keys 1-63 letters,
	// digits and . _ / -, values at most 128 characters without spaces.
	Labels map[string]string `yaml:"labels,omitempty"`
	// EKSHA256 is the sha256 (64 hex digits) of the TPM endorsement key's
	// SubjectPublicKeyInfo the node must attest with.
	EKSHA256 string `yaml:"ek_sha256,omitempty"`
	// Cabling is the site's cabling map for the node: by the node's port
	// (its interface name in CURE: enp1s0), the switch and switch port LLDP
	// must show there. With it, each mapped port gets a cabling verdict.
	Cabling map[string]FileCable `yaml:"cabling,omitempty"`
}

// FileCable is where one port of a node plugs in. Switch or Chassis (or
// both) names the switch; Port is required.
type FileCable struct {
	// Switch is the switch's LLDP system name (leaf-r12-a; a domain after
	// it, leaf-r12-a.dc1, matches too).
	Switch string `yaml:"switch,omitempty"`
	// Chassis is the switch's LLDP chassis ID (a MAC in any case, or the
	// ID as the switch sends it).
	Chassis string `yaml:"chassis,omitempty"`
	// Port is the switch's port as LLDP names it: its port ID or its port
	// description (Ethernet12, swp7), any case.
	Port string `yaml:"port"`
}

// FileBMC is a node's BMC. Exactly one of Password, PasswordEnv and
// PasswordFile gives the password; the TLS identity is pinned by
// Fingerprint, checked against CAFile, or, with neither, against the
// coordinator's --bmc-ca or the system roots.
type FileBMC struct {
	// URL is the BMC's https:// base URL (http:// only with insecure).
	URL      string `yaml:"url"`
	Username string `yaml:"username"`
	// Password is the password itself, stored with the node.
	Password string `yaml:"password,omitempty"`
	// PasswordEnv names an environment variable, set at import and read at
	// every BMC connection.
	PasswordEnv string `yaml:"passwordEnv,omitempty"`
	// PasswordFile is a file not readable by group or others, read at every
	// BMC connection (relative to the nodes file).
	PasswordFile string `yaml:"passwordFile,omitempty"`
	// CAFile is a PEM bundle the BMC's certificate is checked against
	// (relative to the nodes file).
	CAFile string `yaml:"caFile,omitempty"`
	// Fingerprint pins the SHA-256 of the BMC's certificate (hex, any case,
	// ':' separators allowed, optionally prefixed sha256:).
	Fingerprint string `yaml:"fingerprint,omitempty"`
	// Insecure skips TLS verification; the only way to allow an http://
	// URL, and not combined with fingerprint or caFile.
	Insecure bool `yaml:"insecure,omitempty"`
}
