"""The process around the roles: which roles run (``roles``), its own settings (``settings``),
logging (``logs``), the garbage-collector policy (``gc_policy``) and the one event loop with its
health and metrics server and signal handling (``runtime``)."""
