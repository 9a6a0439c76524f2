"""The local multi-host test site with planted near-duplicates (see planted.py)."""
