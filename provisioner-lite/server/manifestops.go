package server

import (
	"context"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ManifestLister lists the manifests the coordinator runs
// (catalog.Catalog).
type ManifestLister interface {
	List() (catalog.Listing, error)
}

// ListManifests names the SKUs and suites of the coordinator's catalog, as
// runs resolve them, and the manifest bundle it runs.
func (o *OperatorService) ListManifests(_ context.Context, _ *curev1.ListManifestsRequest) (*curev1.ListManifestsResponse, error) {
	if o.Manifests == nil {
		return nil, status.Error(codes.Unimplemented, "this coordinator serves no manifest catalog")
	}
	l, err := o.Manifests.List()
	if err != nil {
		// The directory's path is the coordinator's business, not a viewer's.
		o.log().Error("manifests not listed", "err", err)
		return nil, status.Error(codes.Internal, "the coordinator could not read its manifests directory (its log says why)")
	}
	resp := &curev1.ListManifestsResponse{Skus: l.SKUs, Suites: l.Suites, Invalid: l.Invalid, Instance: o.Instance}
	if o.ManifestBundle != nil {
		resp.BundleVersion = o.ManifestBundle()
	}
	return resp, nil
}
