"""The terminal table of `warmstart report`: three blocks, each at most 80 columns wide.

An app's numbers do not fit on one 80-column line, so they are split by question:
  1. how fast (launch times, gain, captured share),
  2. how well the prefetch went (t_exp vs measured, bytes, accuracy, waste, schedule age),
  3. every measured method relative to cold (the bench matrix).
"""

from .summary import METHOD_ORDER, RECORDED_COLD

WIDTH = 80  # every block's columns sum to at most this; cells are clipped to their column
SHORT_METHOD = {"cold": "cold", "cold-traced": "traced", "interleave": "intlv", "reorder": "reorder",
                "reorder-ours": "reord-o", "segmented-paper": "seg-pap", "segmented": "seg", "hook": "hook", "warm": "warm"}


def fmt_s(v):
    """Seconds with 4 significant-ish digits in 6 columns."""
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.3f}"
    if v < 100:
        return f"{v:.2f}"
    return f"{v:.0f}"


def fmt_pct(v, signed=False):
    if v is None:
        return "-"
    return f"{v * 100:+.0f}%" if signed else f"{v * 100:.0f}%"


def fmt_time_spread(s):
    """'3.214 ±4%': the median and half the min-max range as a share of it."""
    if not s:
        return "-"
    half = s["rel_range"] / 2 * 100
    return f"{fmt_s(s['median'])} ±{half:.0f}%"


def fmt_bytes(v):
    if v is None:
        return "-"
    mib = v / (1 << 20)
    return f"{mib:.1f}" if mib < 1000 else f"{mib:.0f}"


def fmt_age(seconds):
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def clip(text, width):
    text = str(text)
    return text if len(text) <= width else text[:width - 1] + "~"


def _render(columns, rows):
    """columns: (title, width, align '<' or '>'); rows: lists of cell strings."""
    def line(cells):
        return " ".join(f"{clip(c, w):{a}{w}}" for c, (_, w, a) in zip(cells, columns)).rstrip()
    out = [line([c[0] for c in columns]), line(["-" * c[1] for c in columns])]
    out += [line(r) for r in rows]
    return out


def render(summaries, title=None) -> str:
    if not summaries:
        return "no measured launches: run `warmstart run` or `warmstart bench` first"
    many_disks = len({s["disk"] for s in summaries}) > 1
    key = (lambda s: f"{s['app']}@{s['disk']}") if many_disks else (lambda s: s["app"])
    out = [title] if title else []

    out.append("Launch times in seconds: median ±half the min-max range")
    out += _render(
        [("app", 13, "<"), ("disk", 9, "<"), ("n", 3, ">"), ("cold", 12, ">"), ("prefetched", 11, ">"),
         ("warm", 11, ">"), ("gain", 5, ">"), ("capt", 5, ">")],
        [[s["app"], s["disk"], str(s["launches"]),
          fmt_time_spread(s["cold"]) + ("*" if s.get("cold_source") == RECORDED_COLD else ""),
          fmt_time_spread(s["prefetched"]), fmt_time_spread(s["warm"]), fmt_pct(s["gain"]),
          fmt_pct(s["captured"])] for s in summaries])
    out.append("gain = 1 - prefetched/cold; capt = (cold - prefetched)/(cold - warm)")
    if any(s.get("cold_source") == RECORDED_COLD for s in summaries):
        out.append(f"cold*: {RECORDED_COLD}")
    out.append("")

    out.append("Prefetch: t_exp (Algorithm 1's estimate) vs measured and the lower bound LB")
    out += _render(
        [("app", 14, "<"), ("method", 7, "<"), ("mech", 7, "<"), ("t_exp", 6, ">"), ("LB", 6, ">"), ("err", 5, ">"),
         ("MiB", 6, ">"), ("acc", 4, ">"), ("waste", 5, ">"), ("age", 5, ">"), ("stale", 5, "<")],
        [[key(s), SHORT_METHOD.get(s["prefetch_method"], s["prefetch_method"] or "-"),
          s["mechanism"] or "-", fmt_s(s["t_exp_s"]), fmt_s(s.get("bound_s")), fmt_pct(s["t_exp_error"], signed=True),
          fmt_bytes(s["prefetched_bytes_median"]), fmt_pct(s["accuracy"]), fmt_pct(s["waste"]),
          fmt_age(s["schedule_age_s"]),
          "-" if s["schedule_stale"] is None else ("yes" if s["schedule_stale"] else "no")]
         for s in summaries])
    out += [f"stale: {s['app']}: {s['schedule_stale_reason']}" for s in summaries if s.get("schedule_stale_reason")]
    out += [f"degraded: {s['app']}: {s['degraded']}" for s in summaries if s.get("degraded")]
    out += [f"not timed: {s['app']}: {s['not_timed']} launch(es) without an exact time, left out of the "
            f"times (the last: {s['not_timed_reason']})" for s in summaries if s.get("not_timed")]
    out.append("err = measured/t_exp - 1; LB: no launch can be faster (its bench run's; see")
    out.append("docs/algorithms.md); MiB prefetched per launch; acc = prefetched-and-used/used;")
    out.append("waste = prefetched-unused/prefetched; age/stale of the schedule used")
    if any(s["prefetch_method"] == "hook" for s in summaries):
        out.append("hook: acc and waste not measured (residency at the exit; docs/hook.md)")
    out.append("")

    present = [m for m in METHOD_ORDER if any(m in s["methods"] for s in summaries)]
    present += sorted({m for s in summaries for m in s["methods"]} - set(present))
    present = present[:7]  # 7 methods x 8 columns + the app column fit in 80
    out.append("Median launch time relative to cold (1.00 = cold)")
    out += _render(
        [("app", 15, "<")] + [(SHORT_METHOD.get(m, m), 7, ">") for m in present],
        [[key(s)] + ["-" if s["methods"].get(m, {}).get("ratio_to_cold") is None
                     else f"{s['methods'][m]['ratio_to_cold']:.2f}" for m in present]
         for s in summaries])
    return "\n".join(out)
