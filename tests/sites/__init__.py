"""Test-only helpers around the demo sites (``neardup.demo``): the rules' crawl simulation."""
