"""Real servers on loopback ports: redis-server, a Redis Cluster, and the Tansu Kafka broker."""

import logging

from neardup.servers.kafka import KafkaBroker, tansu_binary
from neardup.servers.process import free_port, live_processes, stop_all
from neardup.servers.redis import RedisServer, redis_binary
from neardup.servers.redis_cluster import RedisCluster

__all__ = [
    "KafkaBroker",
    "RedisCluster",
    "RedisServer",
    "free_port",
    "live_processes",
    "redis_binary",
    "stop_all",
    "tansu_binary",
]

logger = logging.getLogger(__name__)
