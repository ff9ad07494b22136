"""Retrieval along training: the paired tests of "InfoNCE learns retrieval" between the first and the
last checkpoint, per cell.

* :func:`retrieval_change`: the training risk falls, top-1 agreement of Q_hat with M_hat rises and
  CE(M_hat, Q_hat) falls (one-sided paired t over blocks, each at ``alpha``); recall@10 descriptive;
* :func:`collapsed_start_rule`: top-1 rises from a collapsed start (one-sided paired t at ``alpha``),
  assessed only when the training risk fell by ``min_risk_fall`` and only where a symmetric score
  can represent the kernel;
* :func:`retrieval_schema`: the schema entries of both, for a study with cell dimension ``cell``.

Blocks have shape ``(cell, block, checkpoint)``; risks ``(cell, checkpoint)``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from simkit.stats.analysis import mean_mcse
from simkit.stats.trend import DETECT_POWER, detectable_t, paired_change

__all__ = ["retrieval_change", "collapsed_start_rule", "retrieval_schema", "RETRIEVAL_METRICS"]

#: the retrieval metrics, their long names and the direction of "learns retrieval"
RETRIEVAL_METRICS = {"ce": ("CE(M_hat, Q_hat)", "less"), "top1": ("top-1 agreement", "greater"),
                     "recall10": ("recall@10", "greater")}
_FAILED = "preparation or blocks failed (see cell_error)"


def retrieval_change(blocks: dict[str, ArrayLike], risk: ArrayLike, alpha: float, prefix: str = "ret_") -> dict:
    """The pre-stated retrieval test of every cell: ``<prefix><metric>`` (mean, MCSE per checkpoint),
    ``_diff`` (last minus first, MCSE), ``_p`` (top-1, CE), the Spearman correlation of risk and top-1
    over checkpoints, and ``<prefix>verdict``/``_reason``: "pass" when the risk fell and both one-sided
    tests reject at ``alpha``, "error" when a risk or a top-1 value is not finite."""
    out = {}
    for name, (_, alt) in RETRIEVAL_METRICS.items():
        b = np.asarray(blocks[name], dtype=float)
        out[f"{prefix}{name}"], out[f"{prefix}{name}_mcse"] = mean_mcse(b, axis=1)
        out[f"{prefix}{name}_diff"], out[f"{prefix}{name}_diff_mcse"], p = paired_change(b, alternative=alt)
        if name != "recall10":
            out[f"{prefix}{name}_p"] = p
    risk = np.asarray(risk, dtype=float)
    top1 = out[f"{prefix}top1"]
    out[f"{prefix}spearman"] = np.array([stats.spearmanr(risk[i], top1[i]).statistic if np.ptp(top1[i]) > 0
                                         else np.nan for i in range(risk.shape[0])])
    verdicts, reasons = [], []
    for i in range(risk.shape[0]):
        if not np.all(np.isfinite(risk[i])) or not np.all(np.isfinite(top1[i])):
            verdicts.append("error")
            reasons.append(_FAILED)
            continue
        problems = []
        if not risk[i, -1] < risk[i, 0]:
            problems.append(f"training risk did not fall ({risk[i, 0]:.4f} -> {risk[i, -1]:.4f})")
        if not out[f"{prefix}top1_p"][i] < alpha:
            problems.append(f"top-1 improvement not shown (diff {out[f'{prefix}top1_diff'][i]:+.4f}, "
                            f"p = {out[f'{prefix}top1_p'][i]:.3g})")
        if not out[f"{prefix}ce_p"][i] < alpha:
            problems.append(f"CE(M_hat, Q_hat) fall not shown (diff {out[f'{prefix}ce_diff'][i]:+.4f}, "
                            f"p = {out[f'{prefix}ce_p'][i]:.3g})")
        verdicts.append("pass" if not problems else "fail")
        reasons.append("; ".join(problems))
    out[f"{prefix}verdict"], out[f"{prefix}verdict_reason"] = verdicts, reasons
    return out


def collapsed_start_rule(blocks: dict[str, ArrayLike], risk: ArrayLike, unrepresentable, alpha: float,
                         min_risk_fall: float, prefix: str = "far_") -> dict:
    """The rule of a run from a collapsed start: top-1 rise, one-sided paired t at ``alpha``.

    ``blocks`` holds ``"ce"`` and ``"top1"``. A cell whose kernel a symmetric score cannot represent
    (``unrepresentable[i]`` a non-empty reason, e.g. "rotated kernel: ...") is "not tested"; a non-finite risk or p-value "error"; a risk fall below
    ``min_risk_fall`` "not assessed"; else "pass" when p < alpha, "fail" otherwise. Also returns the
    risk fall, the realised sd of the paired top-1 differences and the rise detected with power 0.9.
    """
    out = {}
    for name in ("ce", "top1"):
        b = np.asarray(blocks[name], dtype=float)
        out[f"{prefix}{name}"], out[f"{prefix}{name}_mcse"] = mean_mcse(b, axis=1)
        out[f"{prefix}{name}_diff"], out[f"{prefix}{name}_diff_mcse"], out[f"{prefix}{name}_p"] = paired_change(
            b, alternative=RETRIEVAL_METRICS[name][1])
    n_b = np.asarray(blocks["top1"]).shape[1]
    risk = np.asarray(risk, dtype=float)
    top1, diff, se, p = (out[f"{prefix}top1{s}"] for s in ("", "_diff", "_diff_mcse", "_p"))
    fall = out[f"{prefix}risk_fall"] = risk[:, 0] - risk[:, -1]
    out[f"{prefix}sd_diff"] = se * math.sqrt(n_b)
    out[f"{prefix}mde"] = detectable_t(stats.t.ppf(1 - alpha, n_b - 1), n_b - 1, se)
    verdicts, reasons = [], []
    for i in range(risk.shape[0]):
        if unrepresentable[i]:
            verdicts.append("not tested")
            reasons.append(f"{unrepresentable[i]} (representability limit: top-1 {top1[i, 0]:.3f} -> {top1[i, -1]:.3f})")
        elif not (np.all(np.isfinite(risk[i])) and np.isfinite(p[i])):
            verdicts.append("error")
            reasons.append(_FAILED)
        elif not fall[i] >= min_risk_fall:
            verdicts.append("not assessed")
            reasons.append(f"training risk fell {fall[i]:.3f} < {min_risk_fall:g} nats")
        elif p[i] < alpha:
            verdicts.append("pass")
            reasons.append("")
        else:
            verdicts.append("fail")
            reasons.append(f"top-1 rise not shown (diff {diff[i]:+.4f} ± {se[i]:.4f}, p = {p[i]:.3g})")
    out[f"{prefix}verdict"], out[f"{prefix}reason"] = verdicts, reasons
    return out


def retrieval_schema(cell: str, alpha: float, *, min_risk_fall: float, margin: float, planned_sd: float,
                     rule: str) -> dict:
    """The schema entries of :func:`retrieval_change` (prefix ``ret_``) and :func:`collapsed_start_rule`
    (prefix ``far_``) for cell dimension ``cell`` and checkpoint dimension ``ckpt``; ``rule`` names the
    collapsed-start rule (e.g. "rule L")."""
    from simkit.runner.schema import estimate_vars, verdict_vars
    from simkit.runner.study import Var
    s, c = (cell,), (cell, "ckpt")
    diff = "sd of paired block differences / sqrt(n_blocks)"

    def nats(n):
        return "; in nats" if n == "ce" else ""

    def v(name, long_name, description, dims=s):
        return {name: Var(dims, long_name, "1", description)}
    out = {}
    for n, (long_name, _) in RETRIEVAL_METRICS.items():
        out.update(estimate_vars(f"ret_{n}", c, f"retrieval {long_name} along training", "mean over blocks" + nats(n)))
        out.update(estimate_vars(f"ret_{n}_diff", s, f"last minus first checkpoint of retrieval {n}",
                                 "paired over blocks" + nats(n), mcse=diff))
    out.update(verdict_vars("ret_verdict", s, "verdict for 'InfoNCE learns retrieval'", f"pass when the training risk "
                            f"fell and both one-sided paired tests (top-1, CE) reject at {alpha:g}",
                            reason_long_name="why the retrieval test failed"))
    for n in ("ce", "top1"):
        long_name = RETRIEVAL_METRICS[n][0]
        out.update(estimate_vars(f"far_{n}", c, f"retrieval {long_name} along training from the collapsed start",
                                 f"mean over blocks; {rule}" + nats(n)))
        out.update(estimate_vars(f"far_{n}_diff", s, f"last minus first checkpoint of far_{n}", "paired over blocks"
                                 + nats(n), mcse=diff))
    out.update(verdict_vars("far_verdict", s, f"verdict of {rule}", "pass, fail, not assessed (risk did not fall), not "
                            "tested (rotated kernel: representability limit) or error", reason_name="far_reason",
                            reason_long_name=f"why {rule} did not pass"))
    for name, text in (("ret_top1_p", "one-sided p-value of no top-1 improvement"),
                       ("ret_ce_p", "one-sided p-value of no fall of CE(M_hat, Q_hat)"),
                       ("far_top1_p", "one-sided p-value of no top-1 rise from the collapsed start")):
        out.update(v(name, text, "paired t, n_blocks - 1 df"))
    out.update(v("far_ce_p", "one-sided p-value of no CE(M_hat, Q_hat) fall from the collapsed start",
                 "paired t; secondary, no verdict"))
    out.update(v("ret_spearman", "Spearman correlation of training risk and top-1 over checkpoints",
                 "descriptive; -1 when top-1 rises exactly as the risk falls"))
    out.update(v("far_risk_fall", "fall of the empirical training risk from the collapsed start, in nats",
                 f"first minus last checkpoint; {rule} needs >= {min_risk_fall:g}"))
    out.update(v("far_sd_diff", "realised sd of the paired per-block top-1 differences",
                 f"planned {planned_sd:g} at 256 anchors"))
    out.update(v("far_mde", f"realised smallest top-1 rise detected with probability {DETECT_POWER:g}", f"margin {margin:g}"))
    return out
