"""The documentation site as `python3 dev.py docs` builds it (mkdocs, strict): it builds without a warning, a
broken link fails the build, nothing in it comes from the network, the reference pages list everything the
code has (every op of the op table, every setting, every operation of the OpenAPI document, the client's
public names), and in a real headless Chromium the op catalog's filter keeps the rows that match."""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.docs.browser import POLL, WAIT
from tests.docs.walkthrough import ROOT

pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, cwd=config.parent,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    ran = build(ROOT / "mkdocs.yml", out)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "WARNING" not in ran.stderr, ran.stderr
    return out


def page_text(site: Path, page: str) -> str:
    text = (site / f"{page}.html").read_text()
    article = text[text.index("<article"):text.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", " ", article))


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The site's configuration (strict, its link validation, its theme) over two pages, one of which links
    a page that does not exist; the same pages without that link build."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the other page](other.md#a-heading).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A heading\n\nBack [home](index.md).\n")
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nhooks: []\nplugins: [search]\nextra_javascript: []\n"
        "extra_css: []\nnav: [index.md, other.md]\n")
    ran = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert ran.returncode == 0, ran.stderr

    page = tmp_path / "docs" / "other.md"
    good = page.read_text()
    for broken, named in (("[the missing page](no-such-page.md)", "no-such-page.md"),
                          ("[a missing heading](index.md#no-such-heading)", "no-such-heading")):
        page.write_text(f"{good}\nSee {broken}.\n")
        ran = build(tmp_path / "mkdocs.yml", tmp_path / "site")
        assert ran.returncode != 0, broken
        warnings = [line for line in ran.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
        assert warnings and all(named in w or "Aborted" in w for w in warnings), ran.stderr


EXTERNAL = re.compile(r"""<(script|link|img|iframe|source)\b[^>]*\b(src|href)=["'](https?:)?//""", re.I)


def test_nothing_is_loaded_from_the_network(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 20
    for path in pages:
        text = path.read_text()
        found = EXTERNAL.search(text)
        assert found is None, f"{path.relative_to(site)}: {text[found.start():found.start() + 200]}"
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, path
    for css in site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text()), css
        assert "@import" not in css.read_text() or "//" not in css.read_text().split("@import")[1][:80], css


def test_the_op_catalog_page_lists_every_op_of_the_op_table(site):
    from gradserve_server.engine import op_catalog

    text = (site / "reference" / "ops.html").read_text()
    rows = re.findall(r'<tr id="op-([^"]+)">', text)
    names = sorted(e["name"] for e in op_catalog())
    assert rows == names and len(names) >= 200
    assert '<input id="catalog-filter"' in text and "assets/catalog.js" in text


def test_the_settings_page_lists_every_setting_with_its_default(site):
    from gradserve_server.app.config import Settings

    text = page_text(site, "reference/settings")
    for name in Settings.model_fields:
        assert f"GRADSERVE_{name.upper()}" in text, name
    assert "GRADSERVE_MAX_BODY_BYTES int 8388608 (8 MiB)" in " ".join(text.split())


def test_the_http_page_lists_every_operation_and_schema_of_the_openapi_document(site):
    doc = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    text = " ".join(page_text(site, "reference/http").split())
    for path, item in doc["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in text, (method, path)
    for name in doc["components"]["schemas"]:
        assert name in text, name


def test_the_client_page_documents_the_clients_public_names(site):
    import gradserve

    text = " ".join(page_text(site, "reference/client").split())
    for name in ("Client", "ProblemError", "session", "sync"):
        assert f"gradserve.{name}" in text, name
    for method in ("create_session", "run_ops", "eval", "graph", "ops_catalog"):
        assert hasattr(gradserve.Client, method) and method in text, method


def test_the_graph_tutorial_shows_the_picture_of_its_own_program(site):
    """tutorial/graph.svg is drawn at build time from the op list the page's walk-through sends."""
    svg = (site / "tutorial" / "graph.svg").read_text()
    assert svg.lstrip().startswith("<svg") or "<svg" in svg[:300]
    for line in ("SumBackward0", "MulBackward0", "y.grad = [1, 1, 1] (retained)", "w.grad = 6 (1 accumulation)",
                 "_saved_self: float32[3] (freed)"):
        assert line in svg, line
    assert 'src="graph.svg"' in (site / "tutorial" / "graph.html").read_text()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(site):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def visible_ops(browser) -> list[str]:
    return browser.execute_script("""
        return Array.from(document.querySelectorAll('#catalog-table tbody tr'))
            .filter(r => r.offsetParent !== null).map(r => r.id.slice(3));""")


def test_the_catalog_filter_works_in_a_browser_and_nothing_comes_from_elsewhere(site_url, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from gradserve_server.engine import op_catalog

    catalog = op_catalog()
    browser.get(f"{site_url}/reference/ops.html")
    wait = WebDriverWait(browser, WAIT, poll_frequency=POLL)
    box = wait.until(lambda b: b.find_element(By.ID, "catalog-filter"))
    assert len(visible_ops(browser)) == len(catalog)

    box.send_keys("linalg.")
    expected = sorted(e["name"] for e in catalog if "linalg." in json.dumps(
        [e["name"], e["aliases"], e["doc"]]).lower())
    wait.until(lambda b: len(visible_ops(b)) == len(expected))
    shown = visible_ops(browser)
    assert "linalg.det" in shown and "mul" not in shown
    assert browser.find_element(By.ID, "catalog-count").text == f"{len(shown)} of {len(catalog)} ops"

    box.clear()
    box.send_keys("MulBackward0 elementwise")  # every word must match: a grad_fn name and a family
    wait.until(lambda b: "mul" in visible_ops(b) and "add" not in visible_ops(b))
    for name in visible_ops(browser):
        entry = next(e for e in catalog if e["name"] == name)
        # the filter ignores case, as a search box does: AddcmulBackward0 matches too
        text = " ".join([*entry["grad_fns"], entry["doc"]]).lower()
        assert "mulbackward0" in text, name
    browser.save_screenshot(str(tmp_path / "catalog.png"))

    box.clear()
    box.send_keys("no-op-is-called-this")
    wait.until(lambda b: visible_ops(b) == [])
    assert browser.find_element(By.ID, "catalog-count").text == f"0 of {len(catalog)} ops"

    # a link with ?op= opens the page filtered
    browser.get(f"{site_url}/reference/ops.html?op=slogdet")
    wait.until(lambda b: b.find_element(By.ID, "catalog-filter").get_attribute("value") == "slogdet")
    assert set(visible_ops(browser)) == {e["name"] for e in catalog if "slogdet" in json.dumps(
        [e["name"], e["aliases"], e["doc"], e["grad_fns"], e["family"]]).lower()}
    assert "linalg.slogdet" in visible_ops(browser)

    # the graph tutorial's picture is drawn
    browser.get(f"{site_url}/tutorial/graph.html")
    width = wait.until(lambda b: b.execute_script(
        "const i = document.querySelector('article img[src$=\"graph.svg\"]');"
        "return i && i.complete && i.naturalWidth;"))
    assert width > 200

    # the site's search (lunr, in the browser) finds a page, from the site's own index
    browser.get(f"{site_url}/index.html?q=graph_freed")
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))

    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin);")
    assert origins and set(origins) == {site_url}, set(origins)


def test_the_site_works_opened_from_the_disk(site, browser):
    """file://: links lead to pages (not folders) and the catalog filters (the search needs HTTP)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT, poll_frequency=POLL)
    browser.get((site / "index.html").as_uri())
    link = wait.until(lambda b: b.find_element(By.LINK_TEXT, "op catalog"))
    browser.execute_script("arguments[0].click();", link)
    box = wait.until(lambda b: b.find_element(By.ID, "catalog-filter"))
    assert browser.current_url.endswith("reference/ops.html")
    box.send_keys("linalg.det")
    wait.until(lambda b: "linalg.det" in visible_ops(b) and "mul" not in visible_ops(b))
    link = browser.find_element(By.LINK_TEXT, "op names and torch's namespaces")
    browser.execute_script("arguments[0].click();", link)
    wait.until(lambda b: b.current_url.endswith("reference/requests.html#op-names-and-torchs-namespaces"))
    assert "Op names and torch's namespaces" in browser.find_element(By.TAG_NAME, "article").text


def test_the_readmes_links_lead_to_pages_of_the_site():
    """README.md is not part of the site's strict build: its relative links are checked here."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert len(local) >= 15
    for link in local:
        assert (ROOT / link).exists(), link
    assert len(text.splitlines()) < 80  # a front door: what it is, two commands, an example, links
