"""The HTML report's shell: escaping, its style (screen and print), the small script that filters the op table,
and the Content-Security-Policy that lets the page load nothing from anywhere: its one script is allowed by its
hash, its style sheet by its hash, its images only as ``data:`` URIs it carries itself."""

from __future__ import annotations

import base64
import hashlib
import html
import re

STYLE = """
:root { --fail: #d62728; --edge: #f08c00; --pass: #2b8a3e; --muted: #5f6b76; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1100px;
  padding: 0 1em; color: #1d2329; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; width: 100%; margin: .4em 0; }
th, td { text-align: left; padding: .25em .5em; border-bottom: 1px solid #e6e6e6; vertical-align: top; }
th { background: #f4f6f8; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre { background: #f6f8fa; padding: .5em; white-space: pre-wrap; word-break: break-all; margin: .2em 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15em 1em; margin: .5em 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-all; }
.verdict { font-weight: 600; } .v-failed, .v-error { color: var(--fail); } .v-edge { color: var(--edge); }
.v-passed { color: var(--pass); } .note { color: var(--muted); }
img.plot { max-width: 100%; height: auto; display: block; margin: .4em 0; }
.filter { display: flex; gap: .6em; align-items: center; margin: .5em 0; }
.filter input { flex: 1; padding: .3em; } tr.hidden { display: none; }
section.op { break-inside: avoid-page; }
@media print {
  body { max-width: none; margin: 0; font-size: 11px; } .filter { display: none; } tr.hidden { display: table-row; }
  img.plot { break-inside: avoid; } h2 { break-after: avoid; } a { color: inherit; text-decoration: none; }
}
"""

#: Filters the op table by a text in the name and by verdict; the rows are all in the page, so it prints whole.
SCRIPT = """
(function () {
  var input = document.getElementById("op-filter");
  var select = document.getElementById("op-status");
  var count = document.getElementById("op-count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#op-table tbody tr"));
  function apply() {
    var text = input.value.trim().toLowerCase();
    var status = select.value;
    var shown = 0;
    rows.forEach(function (row) {
      var ok = row.getAttribute("data-name").indexOf(text) !== -1;
      if (ok && status) { ok = row.getAttribute("data-status") === status; }
      row.classList.toggle("hidden", !ok);
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }
  input.addEventListener("input", apply);
  select.addEventListener("change", apply);
  document.documentElement.setAttribute("data-filter-ready", "1");
  apply();
})();
"""


#: Control characters (but tab, newline, carriage return) and noncharacters: parse errors in HTML text, shown
#: as their escapes.
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff]")


def esc(value: object) -> str:
    """Text from the user's world (op names, messages, file names) as HTML text or a quoted attribute value:
    markup escaped, control characters and lone surrogates (an exception's bytes) written as their escapes."""
    text = "" if value is None else str(value)
    text = _CONTROLS.sub(
        lambda m: f"\\u{ord(m.group()):04x}" if ord(m.group()) > 0xFF else f"\\x{ord(m.group()):02x}", text
    )
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(text, quote=True)


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def csp() -> str:
    """Nothing loads from anywhere: no fetches, frames, fonts or forms; the page's own style sheet and script
    by their hashes (no style or script injected into the page could run)."""
    return (
        f"default-src 'none'; img-src data:; style-src {_hash(STYLE)}; script-src {_hash(SCRIPT)}; "
        "base-uri 'none'; form-action 'none'"
    )


def data_uri_svg(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp())}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
