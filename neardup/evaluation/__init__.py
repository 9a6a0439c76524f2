"""Detection quality, offline: what ``neardup eval``, ``tools/build_corpus.py`` and the quality
tests use, and the dedup worker never runs.

* :mod:`neardup.evaluation.quality`: the exact reference relation (Jaccard of word 4-shingles
  >= 0.9, every pair found), labels, and precision/recall per pair and per page;
* :mod:`neardup.evaluation.detectors`: the detectors scored, as pure functions of a corpus
  (simhash, the worker's hybrid of simhash candidates and sketch verification, Broder's);
* :mod:`neardup.evaluation.minhash`: Broder's MinHash and super-shingles, the baseline.

It builds on the core's public API only (fingerprints, sketches, table designs); the core
imports nothing from here.
"""
