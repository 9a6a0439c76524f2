"""The ``checksum`` field of a page message: what a producer must compute for the worker to
trust it (the worker computes it itself when it is absent).

The worker recognises exact duplicates by this checksum, so a crawler that sends it must use
this very function (BLAKE2b-128 of the NFC text with whitespace collapsed; case and punctuation
kept). It lives in the core, next to the text normalisation it shares with the fingerprint;
the contract names it so that producers import it from here.
"""

from dedup_worker.core.text import content_checksum

__all__ = ["content_checksum"]
