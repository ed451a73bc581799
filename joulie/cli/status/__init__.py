"""`joulie status` (and `kubectl joulie status`): the cluster's energy state at a glance.

``views`` projects NodeTwins to what the status shows, ``report`` builds the summary and the
per-node table from nodes, twins and pods (pure), ``command`` keeps them current with informers.
"""
