package dashboard

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"slices"

	"github.com/cure-oss/cure/provisioner-lite/pki"
)

// Viewer is who is looking.
type Viewer struct {
	Name string
	Role pki.Role
}

// CertViewer authenticates a request by its verified operator client
// certificate, with the checks the gRPC API makes (server/auth.go): signed
// by the coordinator CA (the TLS layer verified it), ClientAuth usage, OU
// cure-operator, a role. Any role may view; the dashboard offers no action.
func CertViewer(r *http.Request) (Viewer, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Viewer{}, errors.New("no verified client certificate: sign in with your operator certificate (provisioner-lite pki --operator NAME)")
	}
	leaf := r.TLS.VerifiedChains[0][0]
	cn := leaf.Subject.CommonName
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return Viewer{}, errors.New("client certificate " + cn + " lacks the ClientAuth key usage")
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, pki.OperatorOU) || cn == "" {
		return Viewer{}, errors.New("client certificate " + cn + " is not an operator certificate")
	}
	role, err := pki.CertRole(leaf)
	if err != nil {
		return Viewer{}, err
	}
	if !role.Allows(pki.RoleViewer) {
		return Viewer{}, errors.New("role " + string(role) + " may not view")
	}
	return Viewer{Name: cn, Role: role}, nil
}

// TLSConfig is the coordinator's server TLS config made to require a
// client certificate from its CA: without one, no page (not even the
// sign-in error) is served.
func TLSConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c
}
