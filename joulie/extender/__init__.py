"""The scheduler-extender role: filter, prioritize and preempt for kube-scheduler."""
