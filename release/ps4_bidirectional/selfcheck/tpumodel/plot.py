"""Timeline pictures: one lane for compute and one per link direction, student above baseline."""
from __future__ import annotations

from .schedule import Timeline
from .sources import has_sources, short_origin

#: resolution of the picture (a notebook shows it about 880 pixels wide) and its palette size
DPI = 80
PALETTE_COLORS = 64
_COLORS = {"mxu": "#4C72B0", "vpu": "#55A868", "mem": "#8DA0CB", "comm": "#DD8452",
           "idle": "#EEEEEE"}


def _lanes(tl: Timeline) -> list:
    return ["compute"] + tl.lanes()


def _lane_name(r) -> str:
    return "compute" if r == "compute" else f"ICI {r[0]} {r[1]}"


def plot_timelines(panels: list[tuple[str, Timeline]], path: str) -> str:
    """Draw each (title, timeline) as a panel, top to bottom; returns ``path``. A task wide
    enough for a label shows its op and, under it, the student's source line it came from
    ('line 11'), or what XLA made it from ('XLA: lines 9, 11'; 'XLA' for an op no line wrote)."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [max(2, len(_lanes(tl))) for _, tl in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.1 + 0.55 * sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    xmax = max((tl.makespan for _, tl in panels), default=0.0) * 1e6 or 1.0
    for ax, (title, tl) in zip(axes[:, 0], panels):
        lanes = _lanes(tl)
        known = has_sources(tl)
        ypos = {r: len(lanes) - 1 - i for i, r in enumerate(lanes)}
        for t in tl.tasks:
            if t.duration <= 0:
                continue
            s, d = tl.start[t.id] * 1e6, t.duration * 1e6
            color = _COLORS["comm"] if t.kind == "comm" else _COLORS[t.unit or "mem"]
            for r in t.resources:
                y = ypos[r]
                ax.broken_barh([(s, d)], (y - 0.4, 0.8), facecolors=color, edgecolors="white",
                               linewidth=0.6)
                if d > xmax * 0.035:
                    tag = short_origin(t, known)
                    ax.text(s + d / 2, y, f"{t.label}\n{tag}" if tag else t.label,
                            ha="center", va="center", fontsize=7,
                            clip_on=True, color="white" if t.kind == "compute" else "black")
        ax.set_yticks([ypos[r] for r in lanes], [_lane_name(r) for r in lanes])
        ax.set_xlim(0, xmax * 1.02)
        ax.set_ylim(-0.6, len(lanes) - 0.4)
        s = tl.summary()
        ax.set_title(f"{title}: {s['time_us']:.1f} us (compute {s['compute_us']:.1f}, "
                     f"communication {s['comm_us']:.1f}, exposed {s['exposed_comm_us']:.1f})",
                     fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("modeled time (us)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    _to_palette(path)
    return path


def _to_palette(path: str) -> None:
    """Store the picture with a small palette: a few flat colours and text, so a notebook that
    shows several timelines stays small."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=PALETTE_COLORS)
    small.save(path, optimize=True)
