"""report.html: the report's markdown as one self-contained page (issue 52). The figures are embedded as base64
PNGs, the style is inline, nothing is fetched from a network, and the first screen (what was compared, the verdicts,
the lift figure, the peak table and what would decide it) fits a laptop's 1280 x 800 window: text on the left, the
lift figure on the right.

The markdown is rendered by markdown-it-py (already installed with rich: CommonMark plus tables); headings get the
ids GitHub gives them, so the report's own links (#verdicts, #words-used-here) work in both.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

from twinrun.core.records import atomic_write_text

STYLE = """
body{margin:0;background:#fff;color:#1b1f24;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,
sans-serif}
main{max-width:1240px;margin:0 auto;padding:10px 22px 48px}
h1{font-size:1.45em;margin:.25em 0 .35em}h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #d8dee4}
h3{font-size:1.05em;margin:1.2em 0 .3em}p{margin:.45em 0}ul{margin:.3em 0;padding-left:1.4em}
code{background:#f1f3f5;border-radius:3px;padding:0 3px;font-size:.88em}
a{color:#0b5cad}img{max-width:100%;height:auto}
.table{overflow-x:auto;margin:.5em 0}table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #d0d7de;padding:2px 7px;text-align:left;vertical-align:top}th{background:#f6f8fa}
.first-screen{display:flex;flex-wrap:wrap;gap:0 26px;align-items:flex-start}
.first-screen .fs-text{flex:1 1 560px;min-width:0}.first-screen .fs-figure{flex:0 1 560px}
.first-screen .fs-figure p:last-child{font-size:.85em;color:#57606a;margin-top:0}
#verdict strong{color:#0a3069}.block-peaks td{white-space:nowrap}.block-next{background:#f6f8fa;border-left:3px solid #0b5cad;padding:2px 10px}
@media (max-width:900px){.first-screen .fs-figure{flex-basis:100%}}
"""


def slug(text: str, seen: dict[str, int]) -> str:
    """GitHub's heading id: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2, ..."""
    base = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def _embed(src: str, folder: Path) -> str:
    path = folder / src
    if src.startswith(("data:", "http:", "https:")) or not path.is_file():
        return src
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_block(lines: Sequence[str], folder: Path, seen: dict[str, int]) -> str:
    """One block of markdown as HTML: heading ids, figures embedded from `folder`, tables in a scrolling box."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse("\n".join(lines))
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            tok.attrSet("id", slug(tokens[i + 1].content, seen))
        for child in tok.children or []:
            if child.type == "image":
                child.attrSet("src", _embed(str(child.attrGet("src") or ""), folder))
    out = md.renderer.render(tokens, md.options, {})
    return out.replace("<table>", '<div class="table"><table>').replace("</table>", "</table></div>")


def page(blocks: Sequence[tuple[str, Sequence[str]]], folder: Path, title: str,
         first_screen: Sequence[str] = ()) -> str:
    """The whole page: the title, the first screen's blocks laid out side by side, then every other block."""
    seen: dict[str, int] = {}
    parts: list[str] = []
    first = [(n, ls) for n, ls in blocks if n in first_screen]
    rest = [(n, ls) for n, ls in blocks if n not in first_screen]

    def div(name: str, lines: Sequence[str]) -> str:
        ident = ' id="verdict"' if name == "headline" else ""
        return f'<div class="block-{name}"{ident}>\n{render_block(lines, folder, seen)}</div>'

    for name, lines in rest[:1]:  # the title
        parts.append(div(name, lines))
    if first:
        top = [div(n, ls) for n, ls in first if n == "compared"]
        text = [div(n, ls) for n, ls in first if n not in ("compared", "lift-figure")]
        fig = [div(n, ls) for n, ls in first if n == "lift-figure"]
        parts.append('<section class="first-screen-wrap">' + "".join(top) + '<div class="first-screen">'
                     f'<div class="fs-text">{"".join(text)}</div>'
                     + (f'<div class="fs-figure">{"".join(fig)}</div>' if fig else "") + "</div></section>")
    parts += [div(n, ls) for n, ls in rest[1:]]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body><main>\n"
            + "\n".join(parts) + "\n</main></body></html>\n")


def write_html(blocks: Sequence[tuple[str, Sequence[str]]], out_dir: str | Path, title: str,
               first_screen: Sequence[str] = ()) -> Path:
    """Write `out_dir/report.html` atomically (figures read from `out_dir`, where report.md links them)."""
    out = Path(out_dir)
    path = out / "report.html"
    atomic_write_text(path, page(blocks, out, title, first_screen))
    return path
