"""Adapters around the pure core: the Redis-backed index and record store, and the Kafka
clients of every process (:mod:`dedup_worker.adapters.kafka`)."""
