"""A replay's summary: per arm the mean [min-max] over its complete repetitions, the prediction
beside it, and the ratios of the arms (bench/replay.py prints it and stores it in replay.json)."""

from __future__ import annotations

from pal_eval.replay.repeat import aggregate, ratio_range

LABELS = {"avg_jct_s": "avg JCT (h)", "median_jct_s": "median JCT (h)", "p99_jct_s": "p99 JCT (h)",
          "makespan_s": "makespan (h)", "utilization": "utilization", "tax_share": "variability tax"}


#: the ratios printed when both arms ran: each pal arm against plain Slurm, and the history's effect
PAIRS = (("pal", "slurm"), ("pal+history", "slurm"), ("pal+history", "pal"))


def print_aggregate(trace: str, results: dict, reps: int) -> dict:
    """Each arm's mean [min-max] over its complete repetitions, the prediction beside it, and
    pal / slurm (pal+history / slurm, pal+history / pal); failed repetitions named and left out.
    Returns the same as a dict (replay.json; `ratios` is pal / slurm, `ratios_by_pair` every pair)."""
    aggs = {arm: aggregate(arm, rs) for arm, rs in results.items()}
    print(f"\n== {trace}: mean [min-max] over the complete repetitions (of {reps})")
    for arm, agg in aggs.items():
        print(f"   arm {arm}: repetitions {list(agg.reps) or 'none'}"
              + (f"; FAILED, left out: {list(agg.failed)}" if agg.failed else ""))
    pairs = [(a, b) for a, b in PAIRS if {a, b} <= aggs.keys()]
    doc: dict = {"trace": trace, "arms": {a: g.as_dict() for a, g in aggs.items()}, "ratios": {},
                 "ratios_by_pair": {f"{a}/{b}": {} for a, b in pairs},
                 "results": {a: [r.get("rep") for r in rs] for a, rs in results.items()}}
    width = {a: max(26, len(a) + 15) for a in aggs}  # "pal+history real [range]" keeps a space before it
    pred_w = {a: max(11, len(a) + 6) for a in aggs}
    print(f"   {'metric':<16}" + "".join(f"{a + ' real [range]':>{width[a]}}{a + ' pred':>{pred_w[a]}}{'diff':>7}"
                                      for a in aggs)
          + "".join(f"   {a}/{b} real [range]   pred" for a, b in pairs))
    for m, label in LABELS.items():
        scale = 1.0 if m in ("utilization", "tax_share") else 1 / 3600.0
        line = f"   {label:<16}"
        for a, agg in aggs.items():
            mean, lo, hi = agg.real[m]
            pmean = agg.predicted[m][0]
            diff = (pmean - mean) / mean if mean and mean == mean else float("nan")
            cell = f"{mean * scale:.2f} [{lo * scale:.2f}-{hi * scale:.2f}]"
            line += f"{cell:>{width[a]}}{pmean * scale:>{pred_w[a]}.2f}{diff * 100:>6.1f}%"
        for a, b in pairs:
            r, lo, hi, n = ratio_range(results[a], results[b], m)
            pr, _plo, _phi, _n = ratio_range(results[a], results[b], m, kind="predicted")
            line += f"   {r:>9.3f} [{lo:.3f}-{hi:.3f}] {pr:>6.3f}"
            doc["ratios_by_pair"][f"{a}/{b}"][m] = {"real": r, "min": lo, "max": hi, "pairs": n, "predicted": pr}
            if (a, b) == ("pal", "slurm"):
                doc["ratios"][m] = doc["ratios_by_pair"]["pal/slurm"][m]
        print(line)
    for arm, rs in results.items():  # where each run's queue left the predicted one, job by job
        for r in sorted(rs, key=lambda r: r.get("rep", 0)):
            miss = r.get("start_misses")
            if not miss:
                continue
            first = "".join(f"; {m['trace_id']} ({m['class']}, {m['gpus']} GPUs, submitted {m['submitted_h']:.1f} h): "
                            f"{m['real_start_h']:.1f} h real, {m['predicted_start_h']:.1f} h predicted"
                            for m in miss["first"][:2])
            print(f"   arm {arm} repetition {r.get('rep')}: {miss['count']} of {miss['of']} jobs started more than "
                  f"{miss['beyond_h']:g} trace h from their predicted start{first}")
    leads = {arm: [((r.get("latencies_s") or {}).get("start_lead_s"), r.get("run_start_lead_s"))
                   for r in sorted(rs, key=lambda r: r.get("rep", 0))] for arm, rs in results.items()}
    for arm, pairs_ in leads.items():  # the calibrated start lead the prediction used, and the run's own
        if any(c is not None for c, _o in pairs_):
            print(f"   arm {arm}: start lead (real s, calibrated / the run's own) "
                  + ", ".join("-" if c is None else f"{c:.2f} / {'-' if o is None else f'{o:.2f}'}" for c, o in pairs_))
    return doc
