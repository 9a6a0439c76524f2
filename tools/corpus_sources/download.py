"""The one-time download of the release archives the corpus needs, into the cache directory.

    python tools/build_corpus.py --download CACHE

fetches, with the ordinary registry clients and pinned versions:

* ``CACHE/npm/npm-<v>.tgz`` for the npm releases of ``sites.NPM_RELEASES`` (``npm pack``):
  their ``docs/content`` (Markdown) and ``docs/output`` (npm's own HTML);
* ``CACHE/pypi/<project>-<v>.tar.gz``: the sdists of docutils and click in the releases of
  ``sites.DOCUTILS_RELEASES`` / ``sites.CLICK_RELEASES`` (``pip download --no-binary``), whose
  ``docs/`` folders are the reStructuredText sources, and those of the held-out sites
  (``holdout.HELD_OUT_SETS``: Flask, Werkzeug, Jinja, pytest, Black, attrs, ~10 MB; then
  coverage.py, mypy, trio, urllib3, packaging, pip, ~14 MB).

Building the corpus afterwards reads only the cache and files installed on the machine.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from corpus_sources import holdout, sites
from corpus_sources.common import MissingTool

logger = logging.getLogger("build_corpus")


def download(cache: Path) -> None:
    """Fetch every archive missing from ``cache`` (present ones are kept)."""
    npm_dir, pypi_dir = cache / "npm", cache / "pypi"
    npm_dir.mkdir(parents=True, exist_ok=True)
    pypi_dir.mkdir(parents=True, exist_ok=True)
    for release in sites.NPM_RELEASES:
        if not (npm_dir / f"npm-{release}.tgz").is_file():
            if shutil.which("npm") is None:
                raise MissingTool("downloading npm's releases needs npm (apt-get install npm)")
            _run(["npm", "pack", f"npm@{release}", "--silent"], npm_dir)
    sdists = [
        *(
            (p, r)
            for p, releases in (
                ("docutils", sites.DOCUTILS_RELEASES),
                ("click", sites.CLICK_RELEASES),
            )
            for r in releases
        ),
        *holdout.archives(),
    ]
    for project, release in sdists:
        if not (pypi_dir / f"{project}-{release}.tar.gz").is_file():
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            _run([*pip, "--no-binary", ":all:", "-d", ".", f"{project}=={release}"], pypi_dir)
    logger.info("cache ready: %s", cache)


def _run(args: list[str], cwd: Path) -> None:
    logger.info("%s", " ".join(args))
    done = subprocess.run(args, cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stderr.decode(errors='replace')[-2000:]}")
