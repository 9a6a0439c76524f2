"""The dedup worker service: a Kafka consumer group deciding pages against a shared index.

``config`` (WorkerConfig from flags and NEARDUP_* variables), ``kafka_io`` (confluent-kafka
adapters), ``service`` (the loop and its commit order), ``metrics`` (Prometheus) and ``main``
(the ``dedup-worker`` entry point).
"""
