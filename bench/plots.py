"""Plots of bench.py's JSON: pair latency and hand-off, per store, tumbler beside its peers.

    python bench/bench.py --peers --json results.json
    python bench/plots.py results.json --out docs/_plots     # pairs.png, handoff.png

``pairs.png`` has a panel per store: the median of an uncontended acquire+release pair of
each contender, its whisker the least and greatest median over the repeats, tumbler's rows,
the store's peers and its floors (the store's cheapest round trips, which exclude nothing)
told apart by colour. ``handoff.png`` has the contended runs' hand-off (a release to the next
holder's grant) the same way, a bar per worker count. The figures are the JSON's, drawn as
they are: the machine and its load are in each plot's title. Needs matplotlib (the docs
extra). Several JSON files may be given: their stores are drawn side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the kinds of row, and how each is drawn
COLOURS = {"tumbler": "#2a6fbb", "peer": "#e08a2c", "floor": "#b8b8b8"}


@dataclass
class Bar:
    contender: str
    kind: str  # "tumbler", "peer" or "floor"
    median: float
    low: float
    high: float


@dataclass
class Store:
    backend: str
    pairs: list[Bar] = field(default_factory=list)
    #: worker count -> the contended rows' hand-offs
    handoffs: dict[int, list[Bar]] = field(default_factory=dict)


def _kind(contender: str, mechanisms: dict[str, str]) -> str:
    if contender.startswith("tumbler"):
        return "tumbler"
    # bench.py's contenders describe a floor as "floor: ..." or "the floor, ..."
    mechanism = mechanisms.get(contender, "")
    return "floor" if mechanism.startswith(("floor", "the floor")) else "peer"


def _bar(row: dict[str, Any], key: str, mechanisms: dict[str, str]) -> Bar | None:
    figure = row.get("summary", {}).get(key)
    if not figure:
        return None
    contender = row["contender"]
    return Bar(
        contender, _kind(contender, mechanisms), figure["median"], figure["min"], figure["max"]
    )


def stores(document: dict[str, Any]) -> list[Store]:
    """The stores of one bench.py JSON document, in the order of its rows."""
    mechanisms = document.get("contenders", {})
    found: dict[str, Store] = {}
    for row in document.get("uncontended", []):
        bar = _bar(row, "pair_median_us", mechanisms)
        if bar is not None:
            found.setdefault(row["backend"], Store(row["backend"])).pairs.append(bar)
    for row in document.get("contended", []):
        bar = _bar(row, "handoff_median_ms", mechanisms)
        if bar is not None:
            store = found.setdefault(row["backend"], Store(row["backend"]))
            store.handoffs.setdefault(int(row["workers"]), []).append(bar)
    return list(found.values())


def _about(document: dict[str, Any]) -> str:
    machine = document.get("machine", {})
    load = machine.get("loadavg_1m")
    end = document.get("loadavg_1m_end")
    loads = f", load {load:.1f} -> {end:.1f}" if load is not None and end is not None else ""
    return f"bench.py, {document.get('date', 'undated')}: {machine.get('cpus', '?')} CPUs{loads}"


def _legend(axes: Any) -> None:
    from matplotlib.patches import Patch

    axes.legend(
        handles=[Patch(color=colour, label=kind) for kind, colour in COLOURS.items()],
        # above the first panel, right of its left-aligned title: over no bar
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncols=3,
        fontsize="small",
        frameon=False,
    )


def _draw_bars(axes: Any, bars: Sequence[Bar], positions: Sequence[float], height: float) -> None:
    axes.barh(
        positions,
        [bar.median for bar in bars],
        height=height,
        xerr=[
            [bar.median - bar.low for bar in bars],
            [bar.high - bar.median for bar in bars],
        ],
        color=[COLOURS[bar.kind] for bar in bars],
        ecolor="#444444",
        capsize=2,
    )


def draw_pairs(all_stores: Sequence[Store], about: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    shown = [store for store in all_stores if store.pairs]
    heights = [len(store.pairs) + 1 for store in shown]
    figure, panels = plt.subplots(
        len(shown),
        1,
        figsize=(8, 0.35 * sum(heights) + 1.2),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for axes, store in zip(panels[:, 0], shown, strict=True):
        positions = list(range(len(store.pairs)))
        _draw_bars(axes, store.pairs, positions, 0.7)
        axes.set_yticks(positions, [bar.contender for bar in store.pairs], fontsize="small")
        _label(axes, store, "pair median, µs")
    _save(figure, panels, f"Uncontended acquire+release\n{about}", path)


def draw_handoffs(all_stores: Sequence[Store], about: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    shown = [store for store in all_stores if store.handoffs]
    contenders = [
        list(dict.fromkeys(bar.contender for bars in store.handoffs.values() for bar in bars))
        for store in shown
    ]
    heights = [len(names) + 1 for names in contenders]
    figure, panels = plt.subplots(
        len(shown),
        1,
        figsize=(8, 0.45 * sum(heights) + 1.2),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for axes, store, names in zip(panels[:, 0], shown, contenders, strict=True):
        counts = sorted(store.handoffs)
        height = 0.8 / len(counts)
        for index, workers in enumerate(counts):
            bars = store.handoffs[workers]
            positions = [names.index(bar.contender) + index * height for bar in bars]
            _draw_bars(axes, bars, positions, height)
            for position in positions:
                axes.annotate(
                    f"P={workers}",
                    (0, position),
                    xytext=(2, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize="x-small",
                    color="white",
                )
        axes.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names, fontsize="small")
        _label(axes, store, "hand-off median, ms (release to the next holder's grant)")
    _save(figure, panels, f"Contended: P workers on one lock\n{about}", path)


def _label(axes: Any, store: Store, xlabel: str) -> None:
    """A store's panel: its rows top down, its name, the figure's axis from 0."""
    axes.invert_yaxis()
    axes.set_title(store.backend, fontsize="medium", loc="left")
    axes.set_xlabel(xlabel)
    axes.set_xlim(left=0)


def _save(figure: Any, panels: Any, title: str, path: Path) -> None:
    """The legend once (on the first panel), the title, and the PNG."""
    import matplotlib.pyplot as plt

    _legend(panels[0, 0])
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plots.py", description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", type=Path, help="bench.py --json output")
    parser.add_argument("--out", type=Path, required=True, help="directory of the PNGs")
    args = parser.parse_args(argv)

    all_stores: list[Store] = []
    abouts: list[str] = []
    for source in args.json:
        document = json.loads(source.read_text(encoding="utf-8"))
        found = stores(document)
        if not any(store.pairs for store in found):
            print(f"plots.py: {source}: no uncontended rows to draw", file=sys.stderr)
            return 2
        all_stores += found
        abouts.append(_about(document))

    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    args.out.mkdir(parents=True, exist_ok=True)
    about = "; ".join(dict.fromkeys(abouts))
    written = [args.out / "pairs.png"]
    draw_pairs(all_stores, about, written[0])
    if any(store.handoffs for store in all_stores):
        written.append(args.out / "handoff.png")
        draw_handoffs(all_stores, about, written[1])
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
