"""The node-lifecycle controller of the manager: drains and powers off idle, down and unpaired
nodes by the policy matrix (``joulie.api.lifecycle``, ``joulie.core.lifecycle``)."""
