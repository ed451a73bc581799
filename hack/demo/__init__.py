"""`make demo`: Joulie on a local cluster of KWOK nodes, with a live view and a summary."""
