"""From one box to a fleet: Prometheus metrics, Node Feature Discovery labels, a fleet report.

Pure functions from a Topology, check rows and probe/check JSON documents to text and data;
the only I/O is `atomic.write_atomic`, which puts a finished file in place with one rename.
"""
