"""Sources of the development corpus built by ``tools/build_corpus.py``.

``common``: the page record and deterministic sampling; ``templates``: site templates a page is
wrapped in; ``render``: Markdown / reStructuredText renderers and site generators; ``sites``:
documentation sites (renderer mirrors, consecutive releases, shared templates); ``short``: short
pages and their edited variants; ``report``: the per-family and per-band report; ``download``:
the one-time download of the release archives into the cache directory.
"""
