"""The documentation site builds with warnings as errors, and its pages render in a real browser.

Builds the site (``mkdocs build --strict``, what ``make docs`` runs) into a temporary folder,
serves it on 127.0.0.1 and opens pages in headless Chromium (the system's ``chromium``, driven by
playwright; ``make docs-browser`` installs it): each page has its title, every ``<img>`` loaded
(``naturalWidth > 0``), the leaderboard shows its plots, and the pages generated from docstrings
and from the agent registry carry what those sources say.

Without a browser the test fails in CI (``CI`` set) and is skipped elsewhere, saying why.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")

#: (page path, text its <h1> holds, text the page must contain)
PAGES = [
    ("", "tune_gym", "Tensor-program auto-tuning"),
    ("getting-started/", "Getting started", "make demo"),
    # rendered by mkdocstrings from tune_gym/envs/tune_env.py's module docstring
    ("environments/", "Environments", "Every episode ends."),
    ("agents/", "Agents", "Every agent"),
    # generated from the registry: the option table read from the class's constructor
    ("agents/xgb-sa/", "xgb-sa", "plan_size"),
    ("leaderboard/", "Leaderboard: suite", "Best-so-far at fixed trial counts"),
    ("leaderboard/vta/", "Leaderboard: suite", "Best-so-far at fixed trial counts"),
    ("api/tune_gym.envs/", "tune_gym.envs", "TuneEnv"),
]


def _unavailable(why: str) -> None:
    """Fail in CI, where the browser is part of the setup (``make docs-browser``); skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI runs `make docs-browser` first to install it)")
    pytest.skip(f"{why}; install it with `make docs-browser` (CI fails instead of skipping)")


def _browser_path() -> str:
    """The Chromium executable: ``$CHROMIUM`` or the first of :data:`BROWSERS` on PATH."""
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if not found:
        _unavailable(f"no headless browser: none of {', '.join(BROWSERS)} is on PATH and $CHROMIUM is unset")
    return str(found)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from this checkout with ``mkdocs build --strict``."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without logging every request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    """A page closed while its assets load resets their connections: not an error of the site."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    """The site served over HTTP on 127.0.0.1 (a free port) for the module's tests."""
    server = _Server(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium through playwright (its own browser downloads are not used)."""
    executable = _browser_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (it is in the `docs` and `dev` extras)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def test_site_builds_with_every_generated_page(site: Path) -> None:
    from agents.base import agent_classes

    for agent_id in agent_classes():
        assert (site / "agents" / agent_id / "index.html").is_file(), agent_id
    for plot in (ROOT / "benchmarks" / "results" / "leaderboard").glob("*/*.png"):
        built = site / "leaderboard" / plot.parent.name / plot.name
        assert built.read_bytes() == plot.read_bytes(), plot
    assert (site / "leaderboard" / "index.html").is_file() and (site / "api" / "index.html").is_file()


@pytest.mark.parametrize(("path", "title", "text"), PAGES, ids=[p[0] or "home" for p in PAGES])
def test_page_renders_with_its_title_and_images(browser: Any, base_url: str, path: str, title: str,
                                                text: str) -> None:
    page = browser.new_page()
    try:
        response = page.goto(base_url + path, wait_until="load")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        h1 = page.locator("article h1").first.inner_text()
        assert title in h1, f"{path}: title {h1!r}, expected {title!r} in it"
        assert text in page.locator("article").inner_text(), f"{path}: {text!r} not on the page"
        images = page.eval_on_selector_all("article img", "els => els.map(e => [e.getAttribute('src'), "
                                           "e.complete, e.naturalWidth])")
        broken = [src for src, complete, width in images if not (complete and width > 0)]
        assert not broken, f"{path}: images that did not load: {broken}"
        if path.startswith("leaderboard/"):
            plots = [src for src, _, width in images if src.endswith("best_so_far.png") and width > 0]
            assert plots, f"{path}: no best-so-far plot among {[src for src, _, _ in images]}"
    finally:
        page.close()
