"""What a node is made of, for every role: the embedded hardware catalog, hardware families and
the single recognition of a node's CPU and GPU models from its NodeHardware status, labels and
annotations. Pure: the only file read is the catalog shipped with the package (or the one a
caller names)."""
