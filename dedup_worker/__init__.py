"""neardup's dedup worker: pure near-duplicate core, message contract and adapters."""

from dedup_worker.errors import NeardupError

__all__ = ["NeardupError"]
__version__ = "0.1.0"
