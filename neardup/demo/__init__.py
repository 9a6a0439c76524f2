"""``neardup demo`` and the local sites it crawls, with their ground truth.

The sites are generated (no files, no network) and served on loopback addresses, so the demo
runs from any install, offline. The test suite uses the same modules:

- :mod:`neardup.demo.planted`: a three-host magazine with planted near-duplicate families
  (mirror host, print view, session id, timestamp, counter, ad, exact copy);
- :mod:`neardup.demo.subtrees`: a two-host documentation site whose duplicates come in subtrees
  (a mirror under another path prefix, two releases, sort/print/session parameters) and whose
  pagination pages look alike without being duplicates;
- :mod:`neardup.demo.server`: serves a site, one loopback address per host, and logs every hit;
- :mod:`neardup.demo.truth`, :mod:`neardup.demo.manifest`: ground truth from the rendered pages;
- :mod:`neardup.demo.site`, :mod:`neardup.demo.score`, :mod:`neardup.demo.run`: the demo itself
  (both sites together, a crawl scored against what a crawl of every link would fetch).
"""
