// Package k8s holds CURE's Kubernetes manifests: a kustomize base (the
// coordinator's StatefulSet, Services, PodDisruptionBudget, config file)
// and overlays (dev, production, proxy-dhcp). It has no code: its test
// renders every overlay and decodes each object strictly with the
// Kubernetes API's Go types, and runs the rendered command lines against
// the real provisioner-lite.
package k8s
