"""``stoker graph``: draw a pipeline's operator graph (operator, instance name, device, edges).

The DOT text is always written. An .svg or .png is rendered by Graphviz's ``dot`` when it is on
PATH; otherwise by a built-in layered layout (columns by topological depth, left to right), drawn
with Pillow for PNG or written as plain SVG, so the command works with no system packages.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from stoker._cli_pipeline import CLIError, load_pipeline, walk

COLOURS = {"cpu": "#cfe2ff", "mixed": "#ffe0b3", "gpu": "#c8f0c8"}  # fill colour per device placement
BOX_H, COL_GAP, ROW_GAP, MARGIN, CHAR_W = 54, 70, 24, 20, 7


@dataclass
class Node:
    """One box of the drawing: an operator, or a pipeline output."""

    key: str
    lines: list[str]
    device: str  # "cpu", "mixed", "gpu" or "output"
    depth: int = 0
    x: int = 0
    y: int = 0
    w: int = 0


@dataclass
class Drawing:
    """Boxes and (source key, target key, label, style) edges."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str, str, str]] = field(default_factory=list)


def build_drawing(pipe) -> Drawing:
    """The operator graph of a traced pipeline as boxes and edges, with depths assigned."""
    d = Drawing()
    ops = walk(pipe)
    for op in ops:
        given = op.args.get("name")
        d.nodes[f"n{op.id}"] = Node(f"n{op.id}", [op.op_name, op.instance_name + ("" if given else " (auto)"),
                                                  f"device={op.device}"], op.device)
    for op in ops:
        for x in op.inputs:
            d.edges.append((f"n{x.source.id}", f"n{op.id}", "" if x.index == 0 else f"[{x.index}]", "solid"))
        for arg, x in op.arg_inputs.items():
            d.edges.append((f"n{x.source.id}", f"n{op.id}", arg, "dashed"))
        for x in op.control_inputs:
            d.edges.append((f"n{x.source.id}", f"n{op.id}", "after", "dotted"))
    for k, out in enumerate(pipe._outputs or []):
        d.nodes[f"out{k}"] = Node(f"out{k}", [f"output {k}", out.name, f"device={out.device}"], "output")
        d.edges.append((f"n{out.source.id}", f"out{k}", "" if out.index == 0 else f"[{out.index}]", "solid"))
    # longest path from a source: ops come inputs-first from walk(), outputs last
    for src, dst, _, _ in sorted(d.edges, key=lambda e: list(d.nodes).index(e[1])):
        d.nodes[dst].depth = max(d.nodes[dst].depth, d.nodes[src].depth + 1)
    # outputs all in one last column, so early outputs (labels) do not sit among the operators
    last = max((n.depth for n in d.nodes.values() if n.device != "output"), default=0) + 1
    for n in d.nodes.values():
        if n.device == "output":
            n.depth = last
    return d


def to_dot(d: Drawing, title: str) -> str:
    """Graphviz DOT text of the drawing."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace('"', '\\"')

    def q(s: str) -> str:
        return f'"{esc(s)}"'

    out = [f"digraph {q(title)} {{", "  rankdir=LR;",
           '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    for n in d.nodes.values():
        fill = COLOURS.get(n.device, "#eeeeee")
        shape = ", shape=ellipse" if n.device == "output" else ""
        label = "\\n".join(esc(line) for line in n.lines)  # DOT's line break inside a label
        out.append(f"  {n.key} [label=\"{label}\", fillcolor={q(fill)}{shape}];")
    for src, dst, label, style in d.edges:
        attrs = [f"style={style}"] + ([f"label={q(label)}"] if label else [])
        out.append(f"  {src} -> {dst} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def layout(d: Drawing) -> tuple[int, int]:
    """Place the boxes: one column per depth, stacked in order; returns (width, height)."""
    columns: dict[int, list[Node]] = {}
    for n in d.nodes.values():
        n.w = max(len(s) for s in n.lines) * CHAR_W + 16
        columns.setdefault(n.depth, []).append(n)
    x, height = MARGIN, 0
    for depth in sorted(columns):
        col = columns[depth]
        width = max(n.w for n in col)
        for i, n in enumerate(col):
            n.x, n.y, n.w = x, MARGIN + i * (BOX_H + ROW_GAP), width
        x += width + COL_GAP
        height = max(height, MARGIN * 2 + len(col) * (BOX_H + ROW_GAP) - ROW_GAP)
    return x - COL_GAP + MARGIN, height


def to_svg(d: Drawing) -> str:
    """A self-contained SVG of the layered layout."""
    w, h = layout(d)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">',
           '<defs><marker id="arrow" markerWidth="10" markerHeight="8" refX="10" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#444"/></marker></defs>',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    dash = {"solid": "", "dashed": ' stroke-dasharray="6,4"', "dotted": ' stroke-dasharray="2,3"'}
    for src, dst, label, style in d.edges:
        a, b = d.nodes[src], d.nodes[dst]
        x1, y1, x2, y2 = a.x + a.w, a.y + BOX_H // 2, b.x, b.y + BOX_H // 2
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#444"{dash[style]} '
                   'marker-end="url(#arrow)"/>')
        if label:
            out.append(f'<text x="{(x1 + x2) // 2}" y="{(y1 + y2) // 2 - 4}" text-anchor="middle" '
                       f'fill="#555">{escape(label)}</text>')
    for n in d.nodes.values():
        out.append(f'<rect x="{n.x}" y="{n.y}" width="{n.w}" height="{BOX_H}" rx="8" '
                   f'fill="{COLOURS.get(n.device, "#eeeeee")}" stroke="#333"/>')
        for i, line in enumerate(n.lines):
            out.append(f'<text x="{n.x + 8}" y="{n.y + 16 + 15 * i}">{escape(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def to_png(d: Drawing, path: str) -> None:
    """Draw the layered layout with Pillow."""
    from PIL import Image, ImageDraw, ImageFont

    w, h = layout(d)
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    for src, dst, label, style in d.edges:
        a, b = d.nodes[src], d.nodes[dst]
        x1, y1, x2, y2 = a.x + a.w, a.y + BOX_H // 2, b.x, b.y + BOX_H // 2
        draw.line([(x1, y1), (x2, y2)], fill="#444" if style == "solid" else "#999", width=1)
        # arrow head: a small triangle pointing along the edge
        ang = math.atan2(y2 - y1, x2 - x1)
        pts = [(x2, y2)] + [(x2 - 10 * math.cos(ang + s), y2 - 10 * math.sin(ang + s)) for s in (0.4, -0.4)]
        draw.polygon(pts, fill="#444")
        if label:
            draw.text(((x1 + x2) // 2, (y1 + y2) // 2 - 14), label, fill="#555", font=font)
    for n in d.nodes.values():
        draw.rounded_rectangle([n.x, n.y, n.x + n.w, n.y + BOX_H], radius=8,
                               fill=COLOURS.get(n.device, "#eeeeee"), outline="#333")
        for i, line in enumerate(n.lines):
            draw.text((n.x + 8, n.y + 5 + 15 * i), line, fill="black", font=font)
    img.save(path, format="PNG")


def graph(path: str, out: str, function: str | None = None, data: str | None = None,
          renderer: str = "auto") -> str:
    """Trace the pipeline of ``path`` (no build, so no GPU is needed) and draw its graph to ``out``
    (.dot, .svg or .png; DOT is also written next to an .svg/.png). Returns a one-line summary."""
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".dot", ".gv", ".svg", ".png"):
        raise CLIError(f"-o {out}: give a file name ending in .dot, .svg or .png")
    loaded = load_pipeline(path, function, data, device_id=None)
    d = build_drawing(loaded.pipe)
    dot_text = to_dot(d, loaded.function)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    dot_path = out if ext in (".dot", ".gv") else os.path.splitext(out)[0] + ".dot"
    with open(dot_path, "w") as f:
        f.write(dot_text)
    how = "DOT"
    if ext in (".svg", ".png"):
        dot_bin = shutil.which("dot") if renderer in ("auto", "graphviz") else None
        if renderer == "graphviz" and dot_bin is None:
            raise CLIError("--renderer graphviz: the Graphviz 'dot' program is not on PATH")
        if dot_bin:
            r = subprocess.run([dot_bin, f"-T{ext[1:]}", dot_path, "-o", out], capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0:
                raise CLIError(f"Graphviz dot failed: {r.stderr.strip()}")
            how = "Graphviz"
        elif ext == ".svg":
            with open(out, "w") as f:
                f.write(to_svg(d))
            how = "built-in layout"
        else:
            to_png(d, out)
            how = "built-in layout"
    n_ops = sum(1 for n in d.nodes.values() if n.device != "output")
    extra = "" if dot_path == out else f" (DOT in {dot_path})"
    return f"{n_ops} operators, {len(d.edges)} edges of {loaded.function} -> {out} [{how}]{extra}"
