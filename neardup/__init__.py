"""neardup: streaming near-duplicate detection inside a web crawl.

The umbrella package: the command line (``neardup up`` and friends) and the local server layer
(:mod:`neardup.stack`) that starts a real Kafka-protocol broker and redis-server on loopback ports
for the embedded default and for the test suite.
"""
