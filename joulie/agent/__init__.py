"""The node-agent role: hardware discovery, NodeHardware publication, cap and governor control."""
