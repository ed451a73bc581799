"""The controller-manager role: policy, performance split, guard, caps, governors, twin."""
