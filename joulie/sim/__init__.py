"""The simulator: simulated node hardware and the telemetry/control service for KWOK clusters."""
