"""Deployment: container images, SageMaker bootstrap and launcher, KubeRay manifests."""
