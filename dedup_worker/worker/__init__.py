"""The dedup worker service: a Kafka consumer group deciding pages against a shared index.

``config`` (WorkerConfig from flags and NEARDUP_* variables), ``service`` (the loop and its
commit order), ``metrics`` (Prometheus) and ``main`` (the ``dedup-worker`` entry point). Its
Kafka clients are in :mod:`dedup_worker.adapters.kafka`.
"""
