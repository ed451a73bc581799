"""Generated Python bindings of the kubelet's PodResources v1 gRPC API (see README.md here).

Nothing in this package is written by hand: ``hack/generate-podresources.sh`` regenerates it.
"""
