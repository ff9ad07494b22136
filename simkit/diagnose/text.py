"""The console summary of a :class:`~simkit.diagnose.Diagnosis` and its CF-1.11 dataset."""

from __future__ import annotations

import datetime as _dt

import numpy as np

__all__ = ["summary", "to_dataset", "describe_convention", "IID_NOTE"]

IID_NOTE = ("k from a batch size is the i.i.d.-negatives proxy: in-batch negatives are drawn without replacement "
            "and shared across the batch's anchors (correlated), which changes the bias constant; not modelled here")


def describe_convention(dg) -> str:
    if dg.convention == "include_anchor":
        return "negatives uniform over all N rows, the anchor included (docs/theory.md's pi)"
    if dg.convention == "exclude_anchor":
        return "negatives uniform over the other N - 1 rows; the anchor is not its own positive"
    return "negatives uniform over the rows of other labels; the anchor is not its own positive"


def _anchors(design) -> str:
    if design.census:
        return f"every one of the {design.n_pop} rows (exact)"
    how = "systematic sample in label order" if design.stratified else "simple random sample"
    return f"{design.rows.size} of {design.n_pop} rows ({how})"


def summary(dg) -> str:
    lines = [f"simkit diagnose: N = {dg.n_rows} rows, d = {dg.dim}, positives from {dg.kernel}, tau = {dg.tau:g}",
             f"  convention: {describe_convention(dg)}"]
    if dg.n_no_positive:
        lines.append(f"  {dg.n_no_positive} rows have no positive other than themselves and are not anchors")
    if dg.label_note:
        lines.append(f"  labels: {dg.label_note} ({dg.n_labels} classes)")
    lines.append(f"  anchors: CE, c1, c2 on {_anchors(dg._design_a)}; exact curve on {_anchors(dg._design_e)}")
    lines.append(f"  CE = {dg.ce:.6g} ± {dg.ce_mcse:.2g} nats (cross-entropy of the positives under softmax retrieval: "
                 "the k -> infinity limit of InfoNCE - log k)")
    lines.append(f"  bias gap_k = R_k - log k - CE ~ c1/k + c2/k^2 for large k: c1 = {dg.c1:.6g} ± {dg.c1_mcse:.2g}, "
                 f"c2 = {dg.c2:.6g} ± {dg.c2_mcse:.2g}; expansion scale {dg.expansion_scale:.4g}")
    kn = dg.k_needed()
    if kn.k is None:
        lines.append(f"  negatives needed for |bias| <= {dg.eps:g} nats: more than {kn.more_than} "
                     f"(the exact curve is still above eps at k_max = {dg.k_max}"
                     + (f"; {kn.note})" if kn.note else ")"))
    else:
        hi = str(kn.high) if kn.high is not None else f"more than {kn.more_than}"
        lines.append(f"  negatives needed for |bias| <= {dg.eps:g} nats: k = {kn.k} (95% interval {kn.low} to {hi}; "
                     f"from the {kn.source} curve)")
    if dg.k is not None:
        b = dg.bias_at()
        how = "" if dg.k_how == "given" else f" ({dg.k_how})"
        lines.append(f"  at k = {dg.k}{how}: bias = " + (f"{b.value:.4g} ± {b.mcse:.2g} nats ({b.source})"
                                                         if np.isfinite(b.value) else f"not available ({b.note})"))
        if dg.from_batch and dg.batch is not None:
            bt = dg.batch
            name = "NT-Xent" if bt["scheme"] == "ntxent" else "CLIP-style"
            lines.append(f"  in-batch ({name}, docs/theory.md §16): c1_batch = {bt['c1']:.6g} ± {bt['c1_mcse']:.2g} "
                         f"(i.i.d. c1 {dg.c1:.6g}); bias at k = {dg.k} ~ c1_batch/k = {bt['bias']:.4g} ± "
                         f"{bt['bias_mcse']:.2g} nats (first order); |bias| <= {dg.eps:g} from B = {bt['batch_needed']} "
                         f"(k = {bt['k_needed']}); limit {bt['limit']:.6g} ± {bt['limit_mcse']:.2g} nats, "
                         f"{bt['limit_minus_ce']:+.4g} from CE")
            lines.append("  the exact curve and k needed above are for i.i.d. negatives at the same k (a proxy)")
        elif dg.from_batch:
            lines.append("  note: " + IID_NOTE)
    lines.append(f"  expansion beyond k_max = {dg.k_max}: " + ("used, " if dg.expansion_ok else "not used: ")
                 + dg.expansion_note)
    if dg.slope_fit is None:
        lines.append(f"  rate of the Monte Carlo gap: {dg.slope_note}")
    else:
        f = dg.slope_fit
        lines.append(f"  rate: slope of log|gap| on log k = {f.slope:.4g}, 95% [{f.ci_low:.4g}, {f.ci_high:.4g}] "
                     f"(k >= {f.k_min}; -1 under the 1/k theory, -1/2 under the older 1/sqrt(k) bound; "
                     f"p of slope = -1/2: {f.p_half:.2g})")
    if dg.retrieval:
        t1, r10 = dg.retrieval.get("top1"), dg.retrieval.get("rec10")
        parts = []
        if t1:
            parts.append(f"top-1 = {t1[0]:.4g} ± {t1[1]:.2g}")
        if r10:
            parts.append(f"recall@10 = {r10[0]:.4g} ± {r10[1]:.2g}")
        lines.append("  retrieval by score (anchor excluded) finds a positive: " + ", ".join(parts))
    return "\n".join(lines)


def _a(long_name: str, description: str, units: str = "1") -> dict:
    return {"long_name": long_name, "units": units, "description": description}


def to_dataset(dg):
    import xarray as xr

    from simkit.runner.provenance import versions

    k = dg.grid
    ex, ex_se = dg.curve(k)
    pred = dg.c1 / k + dg.c2 / k.astype(float) ** 2
    kn = dg.k_needed()
    nan = float("nan")
    b = dg.bias_at() if dg.k is not None else None
    nats = "in nats (dimensionless)"
    data = {
        "gap_exact": (("k",), ex, _a("exact finite-k bias gap_k in nats",
                                     "R_k - log k - CE, exact per anchor (Frullani identity), averaged over the "
                                     "exact-curve anchors; beyond k_max the expansion where shown to hold, else NaN; "
                                     + nats)),
        "gap_exact_mcse": (("k",), ex_se, _a("MCSE of gap_exact in nats", "anchor sampling (0 for every row)")),
        "gap_predicted": (("k",), pred, _a("expansion c1/k + c2/k^2 in nats", "second-order expansion; " + nats)),
        "gap": (("k_mc",), dg.gap_mc, _a("Monte Carlo bias gap_k in nats",
                                         "mean over sampled InfoNCE tuples (control variate log Z); " + nats)),
        "gap_mcse": (("k_mc",), dg.gap_mc_mcse, _a("MCSE of gap in nats", "between independent blocks of anchors")),
        "risk": (("k_mc",), dg.risk_mc, _a("InfoNCE risk R_k in nats", "Monte Carlo; " + nats)),
        "risk_mcse": (("k_mc",), dg.risk_mc_mcse, _a("MCSE of risk in nats", "between independent blocks")),
        "ce": ((), dg.ce, _a("cross-entropy CE(M, Q) in nats", "E[-s(x,x+) + log Z(x)]; " + nats)),
        "ce_mcse": ((), dg.ce_mcse, _a("MCSE of ce in nats", "anchor sampling (and views)")),
        "c1": ((), dg.c1, _a("first-order bias constant c1 in nats", "E[m1/Z - (Z2/Z^2 - 1)/2]; " + nats)),
        "c1_mcse": ((), dg.c1_mcse, _a("MCSE of c1 in nats", "anchor sampling (and views)")),
        "c2": ((), dg.c2, _a("second-order bias constant c2 in nats", "docs/diagnose.md; " + nats)),
        "c2_mcse": ((), dg.c2_mcse, _a("MCSE of c2 in nats", "anchor sampling (and views)")),
        "expansion_scale": ((), dg.expansion_scale, _a("expansion scale max(E Z2/Z^2, E m1/Z)",
                                                       "the expansion in 1/k holds for k well above it")),
        "k_needed": ((), nan if kn.k is None else kn.k,
                     _a("negatives needed for |bias| <= eps", f"smallest k with |gap_j| <= eps = {dg.eps:g} nats for all "
                        f"j >= k; NaN: more than {kn.more_than}")),
        "k_needed_low": ((), nan if kn.low is None else kn.low, _a("lower end of the 95% interval of k_needed",
                                                                   "inverts gap - 1.96 MCSE")),
        "k_needed_high": ((), nan if kn.high is None else kn.high, _a("upper end of the 95% interval of k_needed",
                                                                      "inverts gap + 1.96 MCSE; NaN: beyond range")),
        "bias_at_k": ((), nan if b is None else b.value, _a("bias at the training k in nats",
                                                            f"source: {None if b is None else b.source}; " + nats)),
        "bias_at_k_mcse": ((), nan if b is None else b.mcse, _a("MCSE of bias_at_k in nats", "anchor sampling")),
    }
    if dg.batch is not None:
        bt = dg.batch
        desc = f"in-batch scheme {bt['scheme']} (docs/theory.md §16), exact for the finite set per anchor; "
        for name, key, ln in (("c1_batch", "c1", "first-order bias constant of the in-batch scheme in nats"),
                              ("limit_batch", "limit", "k -> infinity limit of the in-batch InfoNCE - log k in nats"),
                              ("bias_batch", "bias", "first-order in-batch bias c1_batch/k at the training k in nats")):
            data[name] = ((), bt[key], _a(ln, desc + nats))
            data[name + "_mcse"] = ((), bt[key + "_mcse"], _a(f"MCSE of {name} in nats", "anchor sampling"))
        data["batch_needed"] = ((), bt["batch_needed"], _a("batch size for |c1_batch|/k <= eps",
                                                           f"k = 2B - 2 (ntxent) or B - 1 (clip); eps = {dg.eps:g}"))
    f = dg.slope_fit
    for name, val, ln in (("slope", "slope", "slope of log |gap| on log k"),
                          ("slope_ci_low", "ci_low", "lower end of the 95% interval of slope"),
                          ("slope_ci_high", "ci_high", "upper end of the 95% interval of slope"),
                          ("slope_p_half", "p_half", "p-value of slope = -1/2")):
        data[name] = ((), nan if f is None else getattr(f, val), _a(ln, "Monte Carlo gap, jackknife over blocks; "
                                                                       "NaN when not assessed (attrs slope_note)"))
    for name, key, ln in (("top1", "top1", "share of anchors whose top-scoring other row is a positive"),
                          ("recall10", "rec10", "share of anchors with a positive among their 10 top-scoring rows")):
        if key in dg.retrieval:
            data[name] = ((), dg.retrieval[key][0], _a(ln, "retrieval by score, the anchor excluded"))
            data[name + "_mcse"] = ((), dg.retrieval[key][1], _a(f"MCSE of {name}", "anchor sampling"))
    ds = xr.Dataset({n: (dims, np.asarray(v, dtype=float), a) for n, (dims, v, a) in data.items()},
                    coords={"k": ("k", k, _a("number of negatives", "grid of k")),
                            "k_mc": ("k_mc", dg.ks_mc, _a("number of negatives (Monte Carlo)", "Monte Carlo grid"))})
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    ds.attrs = {
        "Conventions": "CF-1.11",
        "title": "simkit diagnose: finite-k InfoNCE bias of user embeddings",
        "history": f"{now} simkit.diagnose(N={dg.n_rows}, d={dg.dim}, kernel={dg.kernel}, tau={dg.tau:g})",
        "source": f"simkit {versions()['simkit']} simkit.diagnose",
        "references": "N. Whiteley (2026); simkit docs/theory.md and docs/diagnose.md",
        "kernel": dg.kernel, "convention": dg.convention, "n_rows": dg.n_rows, "dim": dg.dim, "tau": dg.tau,
        "eps": dg.eps, "k": -1 if dg.k is None else dg.k, "k_how": dg.k_how, "k_max": dg.k_max,
        "n_anchors": int(dg._design_a.rows.size), "n_exact_anchors": int(dg._design_e.rows.size),
        "n_rows_without_positive": dg.n_no_positive, "tuples_per_anchor": dg.tuples_per_anchor,
        "expansion_used_beyond_k_max": int(dg.expansion_ok), "expansion_note": dg.expansion_note,
        "slope_note": dg.slope_note, "k_needed_source": kn.source,
        "iid_note": IID_NOTE if dg.from_batch else "",
    }
    return ds
