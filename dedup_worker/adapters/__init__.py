"""Adapters around the pure core: Redis-backed index and record store."""
