"""The simulator: hardware catalog, physics and the telemetry/control service for KWOK clusters."""
