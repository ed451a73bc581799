"""A node's GPUs as the agent sees them: discovery, power limits, clocks and power readings,
through one backend per vendor interface."""
