"""The HTML report as a person sees it: rendered by Debian's chromium through playwright.

Fails on a console error, an image that does not load, or a figure with nothing drawn in it.
The screenshot (1280 px wide, the whole page) stays in build/screenshots/ for a person to look at.
"""

import json
import os
import shutil


from conftest import REPO, require
from test_report import fill, run
from warmstart.db import open_db

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = REPO / "build" / "screenshots"

# Per <img>: loaded, its drawn size, and the share of pixels that differ from the page's white,
# measured by drawing the decoded image onto a canvas.
_IMAGES_JS = """() => [...document.images].map(img => {
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  let inked = 0;
  if (img.complete && img.naturalWidth > 0) {
    const g = c.getContext('2d'); g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4)
      if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) inked++;
  }
  const r = img.getBoundingClientRect();
  return {alt: img.alt, complete: img.complete, natural: img.naturalWidth, shown: r.width,
          inked: inked / Math.max(1, img.naturalWidth * img.naturalHeight)};
})"""


def render(page_file, screenshot=None):
    """Open page_file in Debian's chromium at 1280 px: (images, errors, page width)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require(sync_playwright is not None, "needs the playwright Python package (make deps installs it)")
    require(os.access(CHROMIUM, os.X_OK), "needs Debian's chromium (make deps installs it)")
    errors = []
    with sync_playwright() as p:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")
            images = page.evaluate(_IMAGES_JS)
            if screenshot:
                page.screenshot(path=str(screenshot), full_page=True)
            width = page.evaluate("() => document.documentElement.scrollWidth")
        finally:
            browser.close()
    return images, errors, width


def test_html_report_renders_in_a_real_browser(db_path, tmp_path):
    fill(open_db(db_path))
    page_file = tmp_path / "report.html"
    doc = json.loads(run(db_path, "--json", "--plot", str(tmp_path / "figs"), "--html", str(page_file)))
    assert len(doc["figures"]) >= 3

    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "report-1280.png"
    images, errors, width = render(page_file, shot)
    print(f"\nscreenshot: {shot}")
    assert not errors, errors
    assert len(images) == len(doc["figures"])
    for img in images:
        assert img["complete"] and img["natural"] > 0, f"image did not load: {img}"
        assert img["shown"] > 200, f"figure drawn too small to read: {img}"
        assert img["inked"] > 0.01, f"figure is empty (nothing but background): {img}"
    assert width <= 1280, "the page scrolls sideways at 1280 px"
    assert shot.stat().st_size > 10_000


def test_browser_check_catches_a_broken_image(tmp_path):
    """The check itself can fail: a page with a broken image and a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img alt="x" src="data:image/png;base64,AAAA">'
                   "<script>undefinedFunction()</script></body></html>")
    images, errors, _ = render(bad)
    assert errors and "undefinedFunction" in errors[0]
    assert images[0]["natural"] == 0
