"""Kubernetes plumbing on kubernetes-asyncio: client, informers, workqueue, leader election,
change-only writes and events. Nothing in here knows about Joulie's policy."""
