"""One self-contained HTML page (table + figures inlined as base64 PNG) for sharing a report.

Self-contained on purpose: a page mailed or attached to a ticket must not point at files that
stay behind on the machine that made it.
"""

import base64
import html
from pathlib import Path


def render(title: str, table_text: str, figures: list, meta: dict) -> str:
    """figures: [(caption, png_path)]; meta: key -> value shown above the table."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#111}"
        "pre{background:#f4f4f4;padding:1em;overflow-x:auto}figure{margin:2em 0}"
        "img{max-width:100%;border:1px solid #ccc}figcaption{font-size:90%;color:#333}"
        "dt{font-weight:bold;float:left;width:12em}dd{margin-left:12em}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<dl>",
    ]
    parts += [f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(str(v))}</dd>" for k, v in meta.items()]
    parts += ["</dl>", "<h2>Table</h2>", f"<pre>{html.escape(table_text)}</pre>", "<h2>Figures</h2>"]
    for caption, png in figures:
        data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    if not figures:
        parts.append("<p>No figures: no measured launches matched.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
