"""In-batch negatives: NT-Xent, CLIP-style and i.i.d. negatives side by side (docs/theory.md §16).

Pre-registered in ``protocols/in_batch.md`` (committed before the default design's run; its path,
SHA-256 and commit are dataset attributes).

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        §16: with a batch of B items, E ℓ − log k = L + c1/k + O(1/k²) for NT-Xent (k = 2B − 2) and CLIP
           (k = B − 1) with their own constants, and L differs from the paper's CE where πM ≠ π.
Data       Uniform π on S² with a vMF kernel (πM = π; constants by quadrature, sphere_constants), and a vMF π
           with a vMF-like kernel on a 128-point Fibonacci lattice of S² (πM ≠ π; exact finite-set curves).
Estimand   Per (setting, scheme): gap on B − 1 = 1, 2, 4, ..., n_max pairs; its log-log slope; c1; the limit L.
Methods    The streaming pair estimator (simkit.estimators.in_batch) with control variates of exact conditional
           mean 0; simkit.stats.analysis.rate_verdict (WLS fits, jackknife over blocks); the limit by Richardson
           extrapolation of the ζ-free risk at the two largest batches.
Performance  Slope with its interval, c1 and L against exact values (Student t), every estimate with its MCSE.

Run it: ``simkit run in_batch``.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from simkit import Uniform, VMFKernel
from simkit.claims.protocol import protocol_attrs
from simkit.distributions.designs import vmf_grid
from simkit.estimators.in_batch import draw_finite_pairs, in_batch_block, negatives_on_grid
from simkit.estimators.infonce import k_grid
from simkit.exact.in_batch import (finite_anchor_terms, finite_constants, finite_curve, sphere_anchor_terms,
                                   sphere_constants)
from simkit.runner import Check, Param, Study, Var
from simkit.stats.analysis import RATE_FIELDS, combine_verdicts, mean_mcse, rate_verdict, t_pvalue

#: level of every per-case test (slope = -1, c1, limit)
ALPHA = 1e-3
PROTOCOL_PATH = "protocols/in_batch.md"
_ROOT = Path(__file__).resolve().parent.parent
SCHEMES = ("iid", "ntxent", "clip")
#: setting -> design: π family, d, κ_M, τ (and for the lattice: atoms, κ_π)
SETTINGS = {
    "uniform-k5-t05": {"pi": "uniform", "dim": 3, "kappa_m": 5.0, "tau": 0.5, "n_atoms": 0, "kappa_pi": 0.0},
    "uniform-k10-t01": {"pi": "uniform", "dim": 3, "kappa_m": 10.0, "tau": 0.1, "n_atoms": 0, "kappa_pi": 0.0},
    "vmf-lattice": {"pi": "vmf-lattice", "dim": 3, "kappa_m": 4.0, "tau": 0.3, "n_atoms": 128, "kappa_pi": 6.0},
}
C, CN = ("case",), ("case", "n_pairs")


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


_NATS = "nats (dimensionless, udunits '1')"
SCHEMA = {
    **{f"raw_{n}": _v(("case", "block", "n_pairs"), f"per-block {n}, in nats", d + "; " + _NATS)
       for n, d in (("gap_cv", "mean of D - A - Bp + C/2 over the block's anchors"),
                    ("gap_plain", "mean of D = l - log k - l_inf"),
                    ("risk", "mean of l - log k + s0 - E[s0|x] (zeta-free)"))},
    "raw_ell_inf": _v(("case", "block"), "per-block mean of l_inf = -s(x,x+) + log zeta(x), in nats", _NATS),
    **{f"prep_{n}": _v(C, f"per-case constant {n}", "prepare stage (exact; nats except scale)")
       for n in ("c1", "c2", "limit", "ce", "scale")},
    "prep_gap_exact": _v(("case", "gap_exact_dim0"), "exact gap, in nats", "prepare stage; NaN where not computed"),
    "case": _v(C, "design case", "setting/scheme"),
    "setting": _v(C, "design setting", "studies.in_batch.SETTINGS"),
    "scheme": _v(C, "negative-sampling scheme", "iid (k = n), ntxent (k = 2n, SimCLR), clip (k = n, other modality)"),
    "pi": _v(C, "data distribution", "uniform on S^2, or vmf-lattice (simkit.distributions.designs.vmf_grid)"),
    "kappa_pi": _v(C, "concentration of pi", "0 for uniform"),
    "dim": _v(C, "ambient dimension d", "points on S^{d-1} in R^d"),
    "n_atoms": _v(C, "atoms of the lattice pi", "0 for the continuous uniform pi"),
    "kappa_m": _v(C, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M), or its lattice version"),
    "tau": _v(C, "temperature tau", "s(x, y) = x.y / tau"),
    "n_pairs": _v(("n_pairs",), "other items' pairs per anchor, B - 1", "geometric grid 1, 2, 4, ..., n_max"),
    "batch_size": _v(("n_pairs",), "batch size B", "n_pairs + 1"),
    "k": _v(CN, "negatives per anchor k", "2 (B - 1) for ntxent, B - 1 for clip and iid"),
    "gap": _v(CN, "finite-batch gap E l - log k - L, in nats", "block mean of the control-variate estimator"),
    "gap_mcse": _v(CN, "MCSE of gap, in nats", "sd over blocks / sqrt(n_blocks)"),
    "gap_plain": _v(CN, "gap without control variates, in nats", "block mean of D"),
    "gap_plain_mcse": _v(CN, "MCSE of gap_plain, in nats", "sd over blocks / sqrt(n_blocks)"),
    "gap_exact": _v(CN, "exact gap, in nats", "simkit.exact.in_batch.finite_curve (lattice); NaN on the sphere"),
    "risk": _v(CN, "risk E l - log k, in nats", "block mean of the zeta-free risk plus E[s0|x] - s0"),
    "risk_mcse": _v(CN, "MCSE of risk, in nats", "sd over blocks / sqrt(n_blocks)"),
    "k_gap": _v(CN, "k times gap, in nats", "approaches c1_batch_exact"),
    "k_gap_mcse": _v(CN, "MCSE of k_gap, in nats", "k * gap_mcse"),
    "fit_gap": _v(CN, "fitted gap, in nats", "exp of the WLS fit of log gap on log k and 1/k"),
    "resid_rate": _v(CN, "standardised residual of the rate fit", "only k >= k_min enter the fit"),
    "resid_c1": _v(CN, "standardised residual of the c1 fit", "only k >= k_min enter the fit"),
    "c1_batch_exact": _v(C, "exact c1 of the scheme, in nats", "simkit.exact.in_batch (sphere_constants or "
                         "finite_constants), docs/theory.md §16"),
    "c1_batch_estimate": _v(C, "estimated c1, in nats", "WLS of gap on 1/k and 1/k^2 over k >= k_min"),
    "c1_batch_estimate_mcse": _v(C, "MCSE of c1_batch_estimate, in nats", "delete-one-block jackknife"),
    "c2_batch_exact": _v(C, "exact c2 of the scheme, in nats", "simkit.exact.in_batch"),
    "c2_batch_estimate": _v(C, "estimated c2, in nats", "coefficient of 1/k^2"),
    "c2_batch_estimate_mcse": _v(C, "MCSE of c2_batch_estimate, in nats", "delete-one-block jackknife"),
    "c1_t": _v(C, "standardised difference of c1_batch_estimate from c1_batch_exact", "Student t, n_blocks - 1 df"),
    "limit_exact": _v(C, "exact limit L of E l - log k, in nats", "E[-s(x,x+) + log zeta(x)] (§16.1)"),
    "limit_estimate": _v(C, "estimated limit, in nats", "block mean of 2 risk(2n) - risk(n) at the two largest n "
                         "(Richardson; the c2/(2k^2) remainder is below 1e-5 nats at k >= 1024)"),
    "limit_estimate_mcse": _v(C, "MCSE of limit_estimate, in nats", "sd over blocks / sqrt(n_blocks)"),
    "limit_t": _v(C, "standardised difference of limit_estimate from limit_exact", "Student t, n_blocks - 1 df"),
    "limit_p": _v(C, "p-value of limit_t", "two-sided, Student t on n_blocks - 1 df"),
    "ce_exact": _v(C, "the paper's CE(M, Q), in nats", "the iid scheme's limit"),
    "limit_minus_ce_t": _v(C, "(limit_estimate - ce_exact) / limit_estimate_mcse", "how far the measured limit is "
                           "from the paper's CE"),
    "slope": _v(C, "log-log slope of the gap in k", "WLS of log gap on log k and 1/k over k >= k_min"),
    "slope_se": _v(C, "jackknife SE of slope", "delete-one-block jackknife"),
    "slope_ci_low": _v(C, "95% interval for slope, lower", "Student t, jackknife SE"),
    "slope_ci_high": _v(C, "95% interval for slope, upper", "Student t, jackknife SE"),
    "slope_p_half": _v(C, "p-value of slope = -1/2", "two-sided t test"),
    "slope_p_one": _v(C, "p-value of slope = -1", "two-sided t test"),
    "k_min": _v(C, "smallest k in the fits", "smallest grid k >= k_min_factor * expansion scale"),
    "n_pairs_min": _v(C, "smallest B - 1 in the fits", "k_min / (2 for ntxent, else 1)"),
    "expansion_scale": _v(C, "expansion scale in k", "unit size * max(E[1 + w2], E[m1/(unit size * zeta)])"),
    "verdict": _v(C, "verdict of the case", f"pass when the level-{1 - ALPHA:g} slope interval contains -1, "
                  f"-1/2 is rejected at {ALPHA:g}, and |c1_t|, |limit_t| are within the two-sided level-{ALPHA:g} "
                  "Student t critical value"),
    "verdict_reason": _v(C, "why a case failed", "empty when it passed"),
}


@functools.lru_cache(maxsize=8)
def _lattice(n_atoms: int, kappa_pi: float, kappa_m: float, tau: float, scheme: str):
    pts, w, m = vmf_grid(n_atoms, kappa_pi, kappa_m)
    scores = pts @ pts.T / tau
    return pts, w, m, scores, finite_anchor_terms(scores, w, m, scheme)


def _rule_p(ds, name: str, n_blocks: int) -> np.ndarray:
    return t_pvalue(ds[name].values.astype(float), n_blocks - 1)


def _check(kind: str):
    def evaluate(ds) -> dict:
        n = ds.sizes["block"]
        if kind == "rate":
            est, se = ds["slope"].values, ds["slope_se"].values
            ok = (ds["slope_p_one"].values >= ALPHA) & (ds["slope_p_half"].values < ALPHA)
            worst = int(np.nanargmax(np.abs(est + 1.0) / se)) if np.isfinite(se).any() else 0
        else:
            tname = "c1_t" if kind == "constant" else "limit_t"
            est = ds["c1_batch_estimate" if kind == "constant" else "limit_estimate"].values
            se = ds["c1_batch_estimate_mcse" if kind == "constant" else "limit_estimate_mcse"].values
            ok = _rule_p(ds, tname, n) >= ALPHA
            worst = int(np.nanargmax(np.abs(ds[tname].values))) if np.isfinite(ds[tname].values).any() else 0
        verdicts = [("error" if str(v) == "error" else "pass" if o else "fail")
                    for v, o in zip(ds["verdict"].values, ok)]
        detail = "; ".join(f"{c}: {est[i]:.4g} ± {se[i]:.2g} -> {verdicts[i]}" for i, c in enumerate(ds["case"].values))
        return {"estimate": est[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(verdicts),
                "detail": detail}

    def pvalues(ds) -> dict:
        n = ds.sizes["block"]
        p = (ds["slope_p_one"].values if kind == "rate" else _rule_p(ds, "c1_t" if kind == "constant" else "limit_t", n))
        return {f"{c}:{kind}": (float(p[i]), ALPHA) for i, c in enumerate(ds["case"].values)}

    what = {"rate": "slope of log gap on log k: -1 in the level-(1 - alpha) interval, -1/2 rejected",
            "constant": "c1 of the scheme against its derived value (Student t)",
            "limit": "limit of E l - log k (Richardson) against its exact value (Student t)"}[kind]
    return Check(claim="in-batch", statistic=lambda ds: f"{what}; {ds.sizes['case']} cases, alpha {ALPHA:g} each",
                 evaluate=evaluate, false_fail_rate=lambda ds: 1.0 - (1.0 - ALPHA) ** ds.sizes["case"],
                 pvalues=pvalues, protocol=PROTOCOL_PATH, label=f"in-batch {kind}")


class InBatch(Study):
    name = "in_batch"
    claim = "in-batch"
    title = "In-batch negatives: NT-Xent and CLIP against i.i.d. negatives"
    cell_dim = "case"
    ademp = {
        "aim": "E l - log k = L + c1/k + O(1/k^2) for NT-Xent and CLIP batches, with the derived c1 and L",
        "data": "uniform pi on S^2 with vMF kernels (piM = pi); a vMF pi on a 128-point lattice (piM != pi)",
        "estimand": "gap on B - 1 = 1, 2, ..., n_max; its slope in k; c1; the limit L",
        "methods": "streaming pair estimator with exactly centred control variates; WLS fits and jackknife over "
                   "blocks (rate_verdict); Richardson extrapolation of the zeta-free risk for L",
        "performance": "slope interval, t of c1 and L against exact values, MCSE of every estimate",
    }
    schema = SCHEMA
    checks = (_check("rate"), _check("constant"), _check("limit"))
    params = {
        "settings": Param("settings", str, ",".join(SETTINGS), "comma-separated settings", choices=tuple(SETTINGS),
                          multi=True),
        "n_max": Param("n_max", int, 1 << 14, "pairs per block (power of two): B - 1 = 1, 2, ..., n_max",
                       low=64, high=1 << 20, power_of_two=True, quick=1 << 11),
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per case", low=8, high=100000,
                          quick=24),
        "block_anchors": Param("block_anchors", int, 2048, "anchors per block (sharing its pairs)", low=8,
                               high=1 << 20, quick=256),
        "exact_curve": Param("exact_curve", int, 1, "1: the lattice's exact gap curve for the plots (NT-Xent's takes "
                             "~30 s per case: N^2 pair atoms), 0: skip it (the checks do not use it)", low=0, high=1,
                             quick=0),
        "k_min_factor": Param("k_min_factor", float, 16.0, "fit k >= k_min_factor * expansion scale", low=0.0),
    }

    def cells(self, cfg):
        return [{"case": f"{s}/{scheme}", "setting": s, "scheme": scheme, **SETTINGS[s]}
                for s in cfg["settings"].split(",") for scheme in SCHEMES]

    def block_dims(self, cfg):
        return {"gap_cv": ("n_pairs",), "gap_plain": ("n_pairs",), "risk": ("n_pairs",), "ell_inf": ()}, \
            {"n_pairs": k_grid(cfg["n_max"])}

    def prepare(self, cell, cfg, rng):
        scheme, n = cell["scheme"], k_grid(cfg["n_max"])
        size = 2 if scheme == "ntxent" else 1
        gap = np.full(n.size, np.nan)
        if cell["pi"] == "uniform":
            const = sphere_constants(cell["dim"], cell["kappa_m"], cell["tau"])
            c, ce = const[scheme], const["iid"].limit
            t = sphere_anchor_terms(cell["dim"], cell["kappa_m"], cell["tau"], scheme)
            w2, mu = t["w2"], math.exp(t["log_m1"] - t["log_zeta"])
        else:
            _, w, m, scores, t = _lattice(cell["n_atoms"], cell["kappa_pi"], cell["kappa_m"], cell["tau"], scheme)
            c, ce = finite_constants(scores, w, m, scheme), finite_constants(scores, w, m, "iid").limit
            if cfg["exact_curve"]:
                gap = finite_curve(scores, w, m, scheme, negatives_on_grid(scheme, n)).gap
            w2, mu = float(w @ t["w2"]), float(w @ np.exp(t["log_m1"] - t["log_zeta"]))
        scale = size * max(1.0 + w2, mu / size)
        return {"c1": np.array(c.c1), "c2": np.array(c.c2), "limit": np.array(c.limit), "ce": np.array(ce),
                "scale": np.array(scale), "gap_exact": gap}

    def generate(self, cell, cfg, prep, rng):
        scheme, n, n_a = cell["scheme"], k_grid(cfg["n_max"]), cfg["block_anchors"]
        if cell["pi"] == "uniform":
            pi, kern = Uniform(cell["dim"]), VMFKernel(cell["kappa_m"])
            x = pi.rvs(n_a, rng=rng)
            xp = kern.sample(x, rng=rng)
            y = pi.rvs(int(n[-1]), rng=rng)
            yp = kern.sample(y, rng=rng)
            t = sphere_anchor_terms(cell["dim"], cell["kappa_m"], cell["tau"], scheme)
            terms, mean_s0 = {k: t[k] for k in ("log_zeta", "log_m1", "w2")}, t["mean_s"]
        else:
            pts, w, m, _, t = _lattice(cell["n_atoms"], cell["kappa_pi"], cell["kappa_m"], cell["tau"], scheme)
            a, b = draw_finite_pairs(w, m, n_a, rng)
            ya, yb = draw_finite_pairs(w, m, int(n[-1]), rng)
            x, xp, y, yp = pts[a], pts[b], pts[ya], pts[yb]
            terms, mean_s0 = {k: t[k][a] for k in ("log_zeta", "log_m1", "w2")}, t["mean_s"][a]
        out = in_batch_block(x, xp, y, yp, cell["tau"], n, {scheme: terms}, mean_s0)[scheme]
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    def summarise(self, raw, cfg) -> dict:
        n = raw["n_pairs"].values
        schemes = [str(s) for s in raw["scheme"].values]
        kk = np.array([negatives_on_grid(s, n) for s in schemes]).astype(float)
        out = {"batch_size": n + 1, "k": kk}
        for name, var in (("gap", "gap_cv"), ("gap_plain", "gap_plain"), ("risk", "risk")):
            out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{var}"].values, axis=1)
        out["k_gap"], out["k_gap_mcse"] = out["gap"] * kk, out["gap_mcse"] * kk
        out["gap_exact"] = raw["prep_gap_exact"].values
        for name in ("c1", "c2", "limit"):
            out[f"{name}_batch_exact" if name != "limit" else "limit_exact"] = raw[f"prep_{name}"].values
        out["ce_exact"], out["expansion_scale"] = raw["prep_ce"].values, raw["prep_scale"].values
        nb = raw.sizes["block"]
        rows = [rate_verdict(kk[i], raw["raw_gap_cv"].values[i], float(out["expansion_scale"][i]), cfg["k_min_factor"],
                             float(out["c1_batch_exact"][i]), 0.0, alpha=ALPHA, test_constant=True,
                             failed_blocks=bool(str(raw["cell_error"].values[i])))
                for i in range(len(schemes))]
        names = {"const_estimate": "c1_batch_estimate", "const_estimate_mcse": "c1_batch_estimate_mcse",
                 "const2_estimate": "c2_batch_estimate", "const2_estimate_mcse": "c2_batch_estimate_mcse",
                 "const_z": "c1_t", "fit_abs": "fit_gap", "resid_const": "resid_c1"}
        for field in (*RATE_FIELDS, "fit_abs", "resid_rate", "resid_const"):
            if names.get(field, field) in SCHEMA:
                out[names.get(field, field)] = np.array([r[field] for r in rows], dtype=float)
        out["n_pairs_min"] = out["k_min"] / np.where(np.array(schemes) == "ntxent", 2.0, 1.0)
        risk = raw["raw_risk"].values
        rich = 2.0 * risk[:, :, -1] - risk[:, :, -2]  # (case, block)
        out["limit_estimate"], out["limit_estimate_mcse"] = mean_mcse(rich, axis=1)
        se = out["limit_estimate_mcse"]
        out["limit_t"] = (out["limit_estimate"] - out["limit_exact"]) / se
        out["limit_p"] = t_pvalue(out["limit_t"], nb - 1)
        out["limit_minus_ce_t"] = (out["limit_estimate"] - out["ce_exact"]) / se
        verdicts, reasons = [], []
        for i, r in enumerate(rows):
            why = [r["reason"]] if r["reason"] else []
            if out["limit_p"][i] < ALPHA:
                why.append(f"limit t {out['limit_t'][i]:+.2f} (two-sided p {out['limit_p'][i]:.2g} < {ALPHA:g})")
            verdicts.append("error" if r["verdict"] == "error" else "fail" if why else "pass")
            reasons.append("; ".join(why))
        out["verdict"], out["verdict_reason"] = verdicts, reasons
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, **protocol_attrs(PROTOCOL_PATH, _ROOT),
                "analysis": "confirmatory" if not cfg.get("quick") else "quick (CI) design: not the confirmatory run"}

    def summary_text(self, ds) -> str:
        lines = [f"{'case':<24}{'slope':>9}{'c1 est':>18}{'c1 exact':>10}{'t':>7}{'L est':>20}{'L exact':>10}"
                 f"{'t':>7}{'t vs CE':>9}  verdict"]
        for i, c in enumerate(ds["case"].values):
            g = lambda n: float(ds[n].values[i])  # noqa: E731
            lines.append(f"{c:<24}{g('slope'):>9.4f}{g('c1_batch_estimate'):>10.4f} ± {g('c1_batch_estimate_mcse'):<5.4f}"
                         f"{g('c1_batch_exact'):>10.4f}{g('c1_t'):>+7.2f}{g('limit_estimate'):>11.5f} ± "
                         f"{g('limit_estimate_mcse'):<6.5f}{g('limit_exact'):>10.5f}{g('limit_t'):>+7.2f}"
                         f"{g('limit_minus_ce_t'):>+9.1f}  {ds['verdict'].values[i]}")
        return "\n".join(lines)


STUDY = InBatch()
