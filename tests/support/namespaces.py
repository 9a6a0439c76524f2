"""Fresh Redis key namespaces, so tests (and hypothesis examples) never see each other's keys."""

from __future__ import annotations

import uuid


def new_namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"
