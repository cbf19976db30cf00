"""A real headless Chromium (Debian's) driven by playwright-core from editors/vscode/node_modules: a page is
opened from its file, and what a reader would meet is reported back as JSON (requests it made, Content-Security
-Policy violations, images that failed, console errors, the op filter at work, the print layout).

A developer's machine without node, chromium or the npm packages skips (``npm ci`` in editors/vscode, and
``apt-get install chromium``); on CI (``CI`` or ``GPUEMU_REQUIRE_BROWSER`` set) that is a failure: ``.ci/run``
installs them before pytest (``editors/vscode/scripts/e2e.sh deps``) and sets ``GPUEMU_REQUIRE_BROWSER``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYWRIGHT = REPO / "editors" / "vscode" / "node_modules" / "playwright-core"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

#: Opens argv[1] (a file), filters the op table by argv[3] and by verdict argv[4], screenshots to argv[2] (if any).
_SCRIPT = r"""
const { chromium } = require(process.env.GPUEMU_PLAYWRIGHT);
(async () => {
  const [file, shot, text, status] = process.argv.slice(1);
  const browser = await chromium.launch({
    executablePath: process.env.GPUEMU_CHROMIUM, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  });
  const out = { requests: [], console: [], csp: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.on("request", (r) => { if (!/^(file|data):/.test(r.url())) out.requests.push(r.url()); });
    page.on("console", (m) => { if (m.type() === "error") out.console.push(m.text()); });
    page.on("pageerror", (e) => out.console.push("pageerror: " + e.message));
    await page.addInitScript(() => {
      window.__csp = [];
      document.addEventListener("securitypolicyviolation", (e) =>
        window.__csp.push(e.violatedDirective + " " + e.blockedURI));
    });
    const t0 = Date.now();
    await page.goto("file://" + file, { waitUntil: "load" });
    out.load_ms = Date.now() - t0;
    out.images = await page.$$eval("img", (imgs) =>
      imgs.map((i) => ({ alt: i.alt, width: i.naturalWidth, complete: i.complete })));
    out.filter_ready = await page.evaluate(() => document.documentElement.getAttribute("data-filter-ready"));
    const visible = () => page.$$eval("#op-table tbody tr", (rows) =>
      rows.filter((r) => getComputedStyle(r).display !== "none").map((r) => r.getAttribute("data-op")));
    out.rows_all = await visible();
    out.filter_ms = await page.evaluate((t) => {  // one filter over every row, as a keystroke triggers it
      const input = document.getElementById("op-filter");
      const t0 = performance.now();
      input.value = t;
      input.dispatchEvent(new Event("input"));
      return performance.now() - t0;
    }, text);
    await page.fill("#op-filter", text);
    out.rows_text = await visible();
    await page.fill("#op-filter", "");
    await page.selectOption("#op-status", status);
    out.rows_status = await visible();
    out.count_text = await page.textContent("#op-count");
    await page.emulateMedia({ media: "print" });
    out.rows_print = await visible();
    await page.emulateMedia({ media: "screen" });
    await page.selectOption("#op-status", "");
    if (shot) await page.screenshot({ path: shot, fullPage: true });
    out.csp = await page.evaluate(() => window.__csp);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def browser_missing() -> str | None:
    """What is missing to drive a browser here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    if not (PLAYWRIGHT / "package.json").is_file():
        return "playwright-core is not installed (npm ci in editors/vscode)"
    return None


def require_browser() -> None:
    """Skip where no browser can be driven, except on CI, where that is a failure (it must run there)."""
    missing = browser_missing()
    if missing and (os.environ.get("CI") or os.environ.get("GPUEMU_REQUIRE_BROWSER")):
        pytest.fail(f"CI must drive a real browser: {missing} (.ci/run installs it before pytest)")
    if missing:
        pytest.skip(missing)


def open_page(
    page: Path, screenshot: Path | None, *, filter_text: str, status: str, timeout: float = 120
) -> dict[str, Any]:
    """Open ``page`` in headless Chromium; what it loaded and showed (see ``_SCRIPT``): ``load_ms`` to its load
    event, ``filter_ms`` for one filter over the op table."""
    proc = subprocess.run(
        ["node", "-e", _SCRIPT, str(page.resolve()), str(screenshot or ""), filter_text, status],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "GPUEMU_PLAYWRIGHT": str(PLAYWRIGHT), "GPUEMU_CHROMIUM": CHROMIUM},
    )
    assert proc.returncode == 0, f"browser run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
