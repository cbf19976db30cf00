"""The HTML report's plots, drawn with matplotlib (the ``[report]`` extra) as SVG text: no fonts fetched,
text left as text (the browser draws it), the same bytes for the same data (a fixed hash salt, no dates).

A figure is made only for a failing op and for the run's summaries, so a 1,000-op report stays a few
seconds; without matplotlib :func:`available` is False and the page shows its tables alone.
"""

from __future__ import annotations

import functools
import io
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .html_data import Case

#: Titles at a fixed height: placed automatically, each is moved clear of the tick labels, measured at every draw.
TITLE_Y = 1.02
#: The tolerance is 1 on the error-to-tolerance axis; a stored ratio this large stands for a non-finite one.
NON_FINITE_RATIO = 1e299
COLOURS = {
    "passed": "#8c99a6",
    "failed": "#d62728",
    "edge": "#f08c00",
    "error": "#7b2cbf",
    "not_judged": "#1f77b4",
    "not_run": "#444444",
    "cancelled": "#bbbbbb",
}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


#: The plots' own settings, in force while one is made (a caller's matplotlib settings are left as they were).
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "gpuemu", "font.size": 8, "axes.titlesize": 9, "figure.dpi": 72}
F = TypeVar("F", bound=Callable[..., str])


def _styled(fn: F) -> F:
    """Run a figure function under :data:`STYLE` (``matplotlib.rc_context``): read when artists are made and
    when the SVG is drawn."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _figure(width: float, height: float, **margins: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))  # fixed margins: a constrained layout measures every label, ~3x the time
    fig.subplots_adjust(**{"left": 0.08, "right": 0.97, "bottom": 0.12, "top": 0.88, "wspace": 0.3, **margins})
    return fig


def _svg(fig: Any) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # the XML declaration and DOCTYPE belong to a file, not to an image


@_styled
def op_figure(name: str, cases: list[Case], worst: dict[str, Any] | None, grid: list[list[float]] | None) -> str:
    """One failing op on four panels: pass and fail over two dims, over dtype x layout x distribution, the
    cases' error-to-tolerance distribution, and where in the worst case's output the errors lie."""
    fig = _figure(10, 7.2, left=0.07, bottom=0.08, top=0.92, hspace=0.6, wspace=0.35)
    ax = fig.subplots(2, 2)
    fig.suptitle(name, fontsize=10)
    _dims_panel(ax[0][0], cases)
    _class_panel(ax[0][1], cases)
    _ratio_panel(ax[1][0], [c.ratio for c in cases if c.status != "error"])
    _map_panel(ax[1][1], worst, grid)
    return _svg(fig)


def _dims_panel(ax: Any, cases: list[Case]) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = sorted({d for c in cases for d in c.dims}, key=lambda d: -len({c.dims.get(d) for c in cases}))
    if not cases or not names:
        ax.set_axis_off()
        ax.set_title("case space: no dims", loc="left", y=TITLE_Y)
        return
    x, y = names[0], names[1] if len(names) > 1 else None
    for status in ("passed", "edge", "failed", "error"):
        sel = [c for c in cases if c.status == status]
        if sel:
            ax.scatter(
                [c.dims.get(x, 0) for c in sel],
                [c.dims.get(y, 0) if y else c.seed for c in sel],
                s=14 if status == "passed" else 22,
                marker="o" if status == "passed" else "x",
                color=COLOURS[status],
                label=f"{status} ({len(sel)})",
            )
    for axis, dim in (("x", x), ("y", y)):
        values = [c.dims.get(dim, 0) for c in cases] if dim else []
        (ax.xaxis if axis == "x" else ax.yaxis).get_major_locator().set_params(nbins=4)  # ticks cost at every draw
        if values and min(values) > 0 and max(values) / min(values) >= 16:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
            # plain numbers: a log axis labels its ticks as mathtext ($2^{4}$), parsed at ~25 ms a label
            (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            (ax.xaxis if axis == "x" else ax.yaxis).set_minor_formatter(NullFormatter())
    ax.set_xlabel(x)
    ax.set_ylabel(y or "seed")
    ax.set_title("pass / fail over the case space", loc="left", y=TITLE_Y)
    ax.legend(fontsize=7, loc="best")


def _class_panel(ax: Any, cases: list[Case]) -> None:
    rows = sorted({(c.dtype, c.layout) for c in cases})
    cols = sorted({c.distribution for c in cases})
    if not rows or not cols:
        ax.set_axis_off()
        return
    total = Counter((c.dtype, c.layout, c.distribution) for c in cases)
    bad = Counter((c.dtype, c.layout, c.distribution) for c in cases if c.status in ("failed", "error"))
    frac = [[bad[(*r, d)] / total[(*r, d)] if total[(*r, d)] else math.nan for d in cols] for r in rows]
    ax.imshow(frac, cmap="Reds", vmin=0, vmax=1, aspect="auto")
    for i, r in enumerate(rows):
        for j, d in enumerate(cols):
            if total[(*r, d)]:
                ax.text(j, i, f"{bad[(*r, d)]}/{total[(*r, d)]}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"{dt} {lay}" for dt, lay in rows])
    ax.set_xticks(range(len(cols)), cols, rotation=40, ha="right", fontsize=7)
    ax.set_title("failing / cases by dtype, layout and distribution", loc="left", y=TITLE_Y)


def _ratio_panel(ax: Any, ratios: Sequence[float | None], title: str = "error / tolerance of each case") -> None:
    finite = [r for r in ratios if r is not None and 0 < r < NON_FINITE_RATIO]
    nonfinite = sum(1 for r in ratios if r is not None and r >= NON_FINITE_RATIO)
    zero = sum(1 for r in ratios if r is not None and r <= 0)
    if finite:
        ax.hist([math.log10(r) for r in finite], bins=30, color="#4c72b0")
    ax.axvline(0.0, color=COLOURS["failed"], linestyle="--", linewidth=1)
    ax.locator_params(nbins=4)  # each tick is two lines and a label, made and laid out at every draw
    ax.set_xlabel("log10(error / tolerance): right of the line fails")
    ax.set_ylabel("cases")
    extra = [f"{n} {what}" for n, what in ((zero, "exact"), (nonfinite, "non-finite")) if n]
    ax.set_title(title + (f" ({', '.join(extra)} not shown)" if extra else ""), loc="left", y=TITLE_Y)


def _map_panel(ax: Any, worst: dict[str, Any] | None, grid: list[list[float]] | None) -> None:
    seed = (worst or {}).get("seed")
    where = ((worst or {}).get("worst") or {}).get("index")
    if grid:
        ax.imshow(grid, cmap="Reds", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.locator_params(nbins=4)
        ax.set_xlabel("last axis (columns, binned); darker: more elements off (all: darkest)")
        ax.set_ylabel("rows (binned)")
    else:
        ax.set_axis_off()
    ax.set_title(
        f"worst case (seed {seed}): where the errors lie" + (f", worst at {where}" if where else ""),
        loc="left",
        y=TITLE_Y,
    )


@_styled
def summary_figure(summary: dict[str, Any], op_ratios: list[float | None]) -> str:
    """The run at a glance: ops per verdict, and each op's largest error against its tolerance."""
    fig = _figure(10, 2.8, bottom=0.18)
    left, right = fig.subplots(1, 2)
    statuses = [s for s in COLOURS if summary.get(s)]
    left.barh(statuses, [summary[s] for s in statuses], color=[COLOURS[s] for s in statuses])
    for i, s in enumerate(statuses):
        left.text(summary[s], i, f" {summary[s]}", va="center", fontsize=8)
    left.set_xlim(0, max([summary[s] for s in statuses], default=1) * 1.15)  # room for the counts
    left.invert_yaxis()
    left.set_title("ops and kernels by verdict", loc="left", y=TITLE_Y)
    _ratio_panel(right, op_ratios, "each op's largest error / tolerance")
    return _svg(fig)


@_styled
def history_figure(history: list[dict[str, Any]]) -> str:
    """The op verdicts of the last stored runs, oldest left."""
    fig = _figure(10, 2.6, right=0.86, bottom=0.2)
    ax = fig.subplots()
    bottom = [0] * len(history)
    for status, colour in COLOURS.items():
        heights = [h["counts"].get(status, 0) for h in history]
        if any(heights):
            ax.bar(range(len(history)), heights, bottom=bottom, color=colour, label=status)
            bottom = [b + n for b, n in zip(bottom, heights)]
    ax.set_xticks(range(len(history)), [f"{h['run_id'][:6]}\n{h['mode'] or ''}" for h in history], fontsize=6)
    ax.set_ylabel("ops")
    ax.set_title("run over run: op verdicts of the last stored runs", loc="left", y=TITLE_Y)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return _svg(fig)


@_styled
def lint_figure(figures: list[tuple[str, float, float]]) -> str:
    """Each lint figure that has a limit, as a share of it: ``(label, value, limit)``; 1 is the limit."""
    fig = _figure(10, 0.6 + 0.22 * len(figures))
    ax = fig.subplots()
    shares = [v / lim if lim else 0.0 for _, v, lim in figures]
    ax.barh(
        [lab for lab, _, _ in figures],
        shares,
        color=[COLOURS["failed"] if s > 1 else COLOURS["passed"] for s in shares],
    )
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.invert_yaxis()
    ax.set_xlabel("figure / limit (right of the line: over the limit)")
    ax.set_title("kernel lint figures against their limits", loc="left", y=TITLE_Y)
    return _svg(fig)
