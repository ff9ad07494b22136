"""Claim C6, confirmatory: the generalisation gap follows the class's complexity term, not the dimension d.

Pre-registered in ``protocols/capacity.md`` (its path, SHA-256 and commit are global attributes of the
dataset). The complexity term of the Theorem-1-type bound (docs/theory.md sections 13 and 19) is
``C = sqrt(P / n)``, P the dimension of the class; it has no explicit d. Two classes at fixed tau, each
along a line of constant C while d grows:

- "fourier": the 9-parameter Fourier lift of S^2 into S^(d-1) (simkit.embeddings.lifted), n fixed;
- "linear": ``phi_W(x) = W x / |W x|``, W in R^(d x d), data on S^(d-1): the class dimension
  P(d) = d (d + 1) / 2 - 1 grows with d (simkit.exact.capacity), and n = ratio P(d) keeps C fixed;
- "control" (positive control): the linear class at a fixed n, so C grows with d.

Rule, per class: one-sided non-inferiority of the slope b of log2 E[G] on log2 d against b0 = the slope a
``ln d`` factor alone has on the class's grid (simkit.exact.capacity.log_factor_slope): rejecting H0
``b >= b0`` excludes ``E[G] ~ C x log d``. The control must not pass the same rule.

Run it: ``simkit run capacity`` (the pre-registered design) or ``simkit run capacity --quick`` (CI).
``STUDY_REPLICATION`` (``simkit run capacity_replication``) is the same study under
``protocols/capacity_replication.md``: fresh random numbers and the control at n >= P(d).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import xarray as xr

from simkit import Uniform, VMFKernel, exact
from simkit.claims.protocol import protocol_attrs as _protocol_attrs
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.lifted import FourierEmbedding, LiftedRisk
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train
from simkit.estimators.population import paired_risk_difference
from simkit.exact.capacity import complexity_term, iso_complexity_n, linear_class_dimension, log_factor_slope
from simkit.runner import Check, Param, Study, Var, block_of, common_seeds
from simkit.stats.analysis import mean_mcse
from simkit.stats.trend import NonInferiority, non_inferiority, non_inferiority_miss_rate

__all__ = ["STUDY", "STUDY_REPLICATION", "SCHEMA", "CHECKS", "CHECKS_REPLICATION", "ALPHA", "FAMILIES", "PROTOCOL_PATH",
           "PROTOCOL_REPLICATION", "SEED_SPLIT", "verdicts", "margin"]

#: one-sided level of every rule of the study
ALPHA = 0.01
FAMILIES = ("fourier", "linear", "control")
#: the Fourier lift's input sphere S^2 and its class dimension (W in R^(3 x 3))
P_DIM, FOURIER_PARAMS = 3, 9
PROTOCOL_PATH = "protocols/capacity.md"
_ROOT = Path(__file__).resolve().parent.parent
_CHUNK_VALUES = 1 << 22
#: the planned per-block sd of b (protocols/capacity.md section 5): fourier, linear
SIGMA_B_PLANNED = {"fourier": 0.278, "linear": 0.319}

SEED_SPLIT = ("per block: SeedSequence(seed, spawn_key=(*cell_key('capacity', {'design': 'blocks'}), 1, block))"
              ".spawn(4) -> sample, frame, init, evaluation; shared by every (family, d) of the block")
SEED_GROUP = {"design": "blocks"}


def protocol_attrs(root: Path = _ROOT, path: str = PROTOCOL_PATH) -> dict[str, str]:
    """The protocol's provenance attributes (:func:`simkit.claims.protocol.protocol_attrs`)."""
    return _protocol_attrs(path, root)


def margin(ds_grid) -> tuple[float, float]:
    """(b0, delta) of a class's grid: b0 = slope of a ln d factor, delta = 2^b0 - 1 growth per doubling."""
    b0 = log_factor_slope(ds_grid)
    return b0, 2.0 ** b0 - 1.0


# ----------------------------------------------------------------------------------------------
# the dataset

P, PB, F = ("point",), ("point", "block"), ()
SE = "sd over blocks / sqrt(blocks)"


def _v(dims, long_name, description, nats=False):
    return Var(dims, f"{long_name}, in nats" if nats else long_name, "1", description)


QUANTITIES = {
    "gap": ("G, plain", True, "R_k(phi_hat) - R_hat(phi_hat), R_k paired with the identity on fresh tuples"),
    "gap_cv": ("G, control variate", True, "G + R_hat(id) - R_k(id) (exactly zero-mean control); the estimate of G"),
    "gap_eval_mcse": ("evaluation MCSE of G", True, "MCSE of the paired R_k difference within a block"),
    "train_risk": ("R_hat(phi_hat)", True, "empirical risk of the trained embedding"),
    "converged": ("L-BFGS-B converged", False, "1 if the success flag was set"),
    "iterations": ("L-BFGS-B iterations", False, "of the one start"),
}
BLOCK_VARS = tuple(QUANTITIES)
NAMES = {"fourier": "fixed class (fourier)", "linear": "growing class (linear)", "control": "positive control"}


def _family_schema() -> dict:
    out = {
        "b": _v(F, "slope b of log2 E[G] on log2 d", "OLS on the block-mean curve over the class's d grid"),
        "b_se": _v(F, "jackknife SE of b", "delete-one-block jackknife"),
        "b0": _v(F, "margin b0", "slope of log2 ln d on log2 d over the class's grid (a ln d factor)"),
        "growth": _v(F, "growth of E[G] per doubling of d", "2^b - 1"),
        "growth_se": _v(F, "SE of growth", "delta method: ln 2 * 2^b * b_se"),
        "ni_t": _v(F, "non-inferiority t statistic", "(b - b0) / b_se, n_blocks - 1 df"),
        "ni_p": _v(F, "one-sided p-value", "P(T <= ni_t); H0: b >= b0 (a ln d factor or more)"),
        "ni_reject": _v(F, "H0 rejected", "1 if ni_p < alpha"),
        "ni_blocks": _v(F, "blocks in the test", "finished blocks"),
        "beta": _v(F, "secondary: slope of log2 E[G] on log2 C", "descriptive; NaN where C is constant"),
        "beta_se": _v(F, "jackknife SE of beta", "delete-one-block jackknife"),
    }
    return {f"{fam}_{k}": v.like(long_name=f"{NAMES[fam]}: {v.long_name}") for fam in FAMILIES for k, v in out.items()}


SCHEMA = {
    **{f"raw_{n}": _v(PB, f"per-block {ln}", d, nats) for n, (ln, nats, d) in QUANTITIES.items()},
    **{f"prep_{n}": _v(P, f"per-point constant {n}", "exact value for the identity on the cell's sphere", nats=True)
       for n in ("risk_id", "ce_id", "gap_id")},
    **{n: _v(P, f"E[{ln}]" if n.startswith("gap") else ln, "mean over blocks; " + d, nats)
       for n, (ln, nats, d) in QUANTITIES.items()},
    **{f"{n}_mcse": _v(P, f"MCSE of {n}", SE, nats) for n, (ln, nats, d) in QUANTITIES.items()},
    "gap_sd": _v(P, "sd of G over blocks", "replicate-to-replicate sd of G_cv", nats=True),
    "n_finished": _v(P, "finished blocks", "blocks run and finite"),
    "complexity": _v(P, "complexity term C = sqrt(P / n)", "docs/theory.md section 19"),
    "scaled_gap": _v(P, "n E[G] / P", "E[G] in units of P / n (classical regular-model gap: about 1)"),
    **_family_schema(),
    **{f"{r}_verdict": _v(F, f"{NAMES[r]} verdict", "pass / fail / error (protocols/capacity.md section 7)")
       for r in FAMILIES},
    **{f"{r}_reason": _v(F, f"why the {NAMES[r]} check did not pass", "empty when it passed") for r in FAMILIES},
    "point": _v(P, "design point", "family:d"),
    "family": _v(P, "embedding class", "fourier (9 parameters, n fixed), linear (P(d) parameters, n = ratio P(d)) "
                 "or control (linear at a fixed n)"),
    "n_params": _v(P, "class dimension P", "9 (fourier) or d (d + 1) / 2 - 1 (linear class on S^(d-1))"),
    "p_in": _v(P, "input dimension p", "x on S^(p-1): 3 (fourier) or d (linear)"),
    "n": _v(P, "training tuples n", "size of the training sample"),
    "k": _v(P, "negatives per tuple k", "InfoNCE negatives"),
    "tau": _v(P, "temperature tau", "score phi(x).phi(y)/tau"),
    "d": _v(P, "embedding dimension d", "phi maps S^(p-1) into S^(d-1)"),
    "kappa_m": _v(P, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M)"),
}


# ----------------------------------------------------------------------------------------------
# the checks

def _scalar(ds, name):
    return ds[name].values.item() if name in ds.variables else np.nan


def _fam_eval(ds, fam):
    g = lambda n: _scalar(ds, f"{fam}_{n}")  # noqa: E731
    detail = (f"{fam}: b = {g('b'):.4f} ± {g('b_se'):.4f} (growth {100 * g('growth'):+.1f}% ± "
              f"{100 * g('growth_se'):.1f}% per doubling) against b0 = {g('b0'):.4f} (ln d factor), t = {g('ni_t'):.2f} "
              f"on {int(g('ni_blocks')) - 1 if np.isfinite(g('ni_blocks')) else 0} df, one-sided p = {g('ni_p'):.3g}; "
              f"secondary slope on log2 C {g('beta'):.3f} ± {g('beta_se'):.3f}")
    verdict, reason = str(_scalar(ds, f"{fam}_verdict")), str(_scalar(ds, f"{fam}_reason"))
    control = str(_scalar(ds, "control_verdict"))
    if fam != "control" and control != "pass":  # section 7.4: no conclusion unless the control behaves
        verdict, reason = "not assessed", f"{reason + '; ' if reason else ''}positive control '{control}': no conclusion"
    return {"estimate": g("b"), "estimate_mcse": g("b_se"), "verdict": verdict,
            "detail": detail + (f" -> {verdict} ({reason})" if reason else f" -> {verdict}")}


def _planned_false_fail(fam):
    def rate(ds) -> float:
        """1 - planned power at b = 0 (protocol section 5); ALPHA is the false-PASS rate of the rule."""
        n, b0 = _scalar(ds, f"{fam}_ni_blocks"), _scalar(ds, f"{fam}_b0")
        if not (np.isfinite(n) and np.isfinite(b0)):
            return math.nan
        return non_inferiority_miss_rate(int(n), delta=2.0 ** b0 - 1.0, alpha=ALPHA, sigma_b=SIGMA_B_PLANNED[fam])
    return rate


def _sha(ds):
    return str(ds.attrs.get("protocol_sha256", "?"))[:16]


CHECKS = (
    Check("C6", lambda ds: f"pre-registered rule (protocols/capacity.md, sha256 {_sha(ds)}…): fixed class (Fourier lift, "
          f"9 parameters, n fixed): slope b of log2 E[G] on log2 d below the slope of a ln d factor, one-sided t at "
          f"{ALPHA:g} (jackknife SE); stated rate: 1 - planned power at b = 0",
          lambda ds: _fam_eval(ds, "fourier"), _planned_false_fail("fourier"), protocol=PROTOCOL_PATH),
    Check("C6", lambda ds: f"pre-registered rule (protocols/capacity.md, sha256 {_sha(ds)}…): growing class (W x / |W x|, "
          f"P = d(d+1)/2 - 1, n = ratio P so sqrt(P/n) is fixed): the same rule; stated rate: 1 - planned power at b = 0",
          lambda ds: _fam_eval(ds, "linear"), _planned_false_fail("linear"), protocol=PROTOCOL_PATH),
    Check("C6", lambda ds: f"pre-registered positive control (protocols/capacity.md, sha256 {_sha(ds)}…): the growing "
          f"class at a fixed n (complexity grows with d) must NOT pass the rule; stated rate: {ALPHA:g}",
          lambda ds: _fam_eval(ds, "control"), ALPHA, protocol=PROTOCOL_PATH),
)


def verdicts(results: dict[str, tuple[NonInferiority, str]]) -> dict[str, tuple[str, str]]:
    """protocols/capacity.md section 7: per family (verdict, reason) from (test, task errors)."""
    out = {}
    for fam, (ni, err) in results.items():
        if err:
            out[fam] = ("error", f"task errors: {err}")
        elif fam == "control":
            out[fam] = (("pass", "") if ni.defined and not ni.reject else
                        ("fail", f"the control passed the rule (p = {ni.p:.3g}): the design cannot detect growth; "
                                 "C6 not confirmed (inconclusive)" if ni.defined else "control b undefined"))
        elif not ni.defined:
            out[fam] = ("fail", "b undefined (a mean G <= 0 or fewer than 3 blocks)")
        elif ni.reject:
            out[fam] = ("pass", "")
        else:
            out[fam] = ("fail", f"growth {100 * ni.growth:+.1f}% per doubling: a ln d factor not excluded "
                                f"(p = {ni.p:.3g} >= {ALPHA:g})")
    return out


# ----------------------------------------------------------------------------------------------
# the study

class Capacity(Study):
    name = "capacity"
    claim = "C6"
    title = "Claim C6 (confirmatory): the generalisation gap follows the complexity term, not d"
    cell_dim = "point"
    ademp = {
        "aim": "C6: E[G] depends on d only through the complexity term sqrt(P/n); along lines of constant sqrt(P/n) "
               "E[G] grows more slowly than a ln d factor (protocols/capacity.md)",
        "data": "fourier: uniform pi on S^2, 9-parameter Fourier lift into S^(d-1), n fixed; linear: uniform pi on "
                "S^(d-1), phi = Wx/|Wx|, W in R^(d x d), n = ratio P(d); control: linear at fixed n; vMF(x, kappa_M) "
                "positives, k i.i.d. negatives, one tau",
        "estimand": "per class: b = slope of log2 E[G] on log2 d; margin b0 = slope of a ln d factor on the grid",
        "methods": "L-BFGS-B ERM; R_k paired with the identity (exact R_k(id)); zero-mean control variate; "
                   "jackknife SE of b; one-sided t test at ALPHA",
        "performance": "E[G] ± MCSE per (class, d); b, t, p per class; positive control; n E[G] / P; slope on log2 C",
    }
    schema = SCHEMA
    checks = CHECKS
    default_seed = 20261205
    params = {
        "n_blocks": Param("n_blocks", int, 64, "replicate blocks (pre-registered)", low=3, high=10000, quick=3),
        "ds_fixed": Param("ds_fixed", int, "8,16,32,64", "embedding dimensions of the Fourier lift (even, >= 6)",
                          quick="8,16,32", multi=True, min_items=3, low=6, multiple_of=2, items_doc="even d >= 6"),
        "ds_growing": Param("ds_growing", int, "4,8,16,32", "dimensions d = p of the linear class and the control",
                            quick="3,4,6", multi=True, min_items=3, low=3, high=256, items_doc="d >= 3"),
        "n": Param("n", int, 128, "training tuples of the Fourier lift", low=8, high=1 << 16, quick=48),
        "ratio": Param("ratio", float, 8.0, "n / P of the linear class (its complexity term is 1/sqrt(ratio))",
                       low=0.5, high=1000.0),
        "n_control": Param("n_control", int, 280, "training tuples of the positive control (every d)", low=8,
                           high=1 << 16, quick=72),
        "k": Param("k", int, 8, "negatives per tuple", low=1, high=4096, quick=4),
        "tau": Param("tau", float, 0.1, "temperature", low=0.01, high=10.0),
        "kappa_m": Param("kappa_m", float, 10.0, "kernel concentration kappa_M", low=0.5, high=200.0),
        "eval_tuples": Param("eval_tuples", int, 4096, "fresh tuples of the paired R_k evaluation", low=64,
                             high=1 << 22, quick=512),
        "maxiter": Param("maxiter", int, 2000, "L-BFGS-B iteration limit", low=10, high=100000, quick=300),
    }

    def cells(self, cfg):
        common = {"k": int(cfg["k"]), "tau": float(cfg["tau"]), "kappa_m": float(cfg["kappa_m"])}
        out = [{"point": f"fourier:d={d}", "family": "fourier", "d": int(d), "p_in": P_DIM, "n_params": FOURIER_PARAMS,
                "n": int(cfg["n"]), **common} for d in self.params["ds_fixed"].values(cfg["ds_fixed"])]
        grow = [int(d) for d in self.params["ds_growing"].values(cfg["ds_growing"])]
        dims = [linear_class_dimension(d, d) for d in grow]
        for d, pd, n in zip(grow, dims, iso_complexity_n(dims, float(cfg["ratio"]))):
            out.append({"point": f"linear:d={d}", "family": "linear", "d": d, "p_in": d, "n_params": pd, "n": int(n),
                        **common})
        out += [{"point": f"control:d={d}", "family": "control", "d": d, "p_in": d, "n_params": pd,
                 "n": int(cfg["n_control"]), **common} for d, pd in zip(grow, dims)]
        return out

    def block_dims(self, cfg):
        return {name: () for name in BLOCK_VARS}, {}

    def prepare(self, cell, cfg, rng):
        kernel, tau, k, p = VMFKernel(cell["kappa_m"]), cell["tau"], cell["k"], cell["p_in"]
        ce_id = float(exact.cross_entropy(Uniform(p), kernel, tau, rng=rng))
        gap_id = float(exact.gap_exact(kernel, p, tau, [k])[0])
        return {"ce_id": np.array(ce_id), "gap_id": np.array(gap_id), "risk_id": np.array(math.log(k) + ce_id + gap_id)}

    @staticmethod
    def initial(family: str, d: int, s_frame, s_init):
        """The block's start: fourier, W0 ~ N(0, 1) (3 x 3) and the tight frame of FourierEmbedding.frame from a
        seed drawn from ``s_frame`` (nested in d); linear and control, W0 with i.i.d. N(0, 1) entries (d x d)."""
        if family != "fourier":
            return LinearEmbedding(np.random.default_rng(s_init).standard_normal((d, d)))
        frame_seed = int(np.random.default_rng(s_frame).integers(0, 2 ** 62))
        w0 = np.random.default_rng(s_init).standard_normal((P_DIM, P_DIM))
        return FourierEmbedding.frame(P_DIM, d, W=w0, seed=frame_seed)

    def generate(self, cell, cfg, prep, rng):
        """One training set of the block, ERM from one start, G paired with the identity on fresh tuples."""
        s_sample, s_frame, s_init, s_eval = common_seeds(cfg["seed"], self.name, SEED_GROUP, block_of(rng), 4)
        p, d, k, tau = cell["p_in"], cell["d"], cell["k"], cell["tau"]
        pi, kernel = Uniform(p), VMFKernel(cell["kappa_m"])
        sample = TrainingSample.draw(pi, kernel, cell["n"], k, rng=np.random.default_rng(s_sample))
        risk = LiftedRisk(sample, tau)
        res = train(risk, self.initial(cell["family"], d, s_frame, s_init), restarts=1, maxiter=cfg["maxiter"])
        phi, ident = res.embedding, LinearEmbedding.identity(p)
        train_risk = risk.value(phi)
        chunk = max(1, _CHUNK_VALUES // (max(d, p) * (k + 2)))
        diff, diff_mcse = paired_risk_difference(phi, ident, pi, kernel, k, int(cfg["eval_tuples"]), tau=tau,
                                                 chunk=chunk, rng=s_eval, risk=LiftedRisk)
        risk_id = float(prep["risk_id"])
        gap = risk_id + diff - train_risk
        out = dict(gap=gap, gap_cv=gap + EmpiricalRisk(sample, tau).value(ident) - risk_id, gap_eval_mcse=diff_mcse,
                   train_risk=train_risk, converged=float(res.report.converged), iterations=float(res.report.iterations))
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        out = {}
        for name in BLOCK_VARS:
            out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{name}"].values, axis=1)
        g = raw["raw_gap_cv"].values
        finished = np.sum(np.isfinite(g), axis=1)
        out["gap_sd"] = out["gap_cv_mcse"] * np.sqrt(finished)
        out["n_finished"] = finished.astype(float)
        for name in ("risk_id", "ce_id", "gap_id"):
            out[f"prep_{name}"] = raw[f"prep_{name}"].values
        fams, d_all = raw["family"].values.astype(str), raw["d"].values.astype(float)
        n_params, n = raw["n_params"].values.astype(float), raw["n"].values.astype(float)
        out["complexity"] = complexity_term(n_params, n)
        out["scaled_gap"] = n * out["gap_cv"] / n_params
        errors = [str(e) for e in raw["cell_error"].values] if "cell_error" in raw else [""] * fams.size
        res = {}
        for fam in FAMILIES:
            idx = np.flatnonzero(fams == fam)
            blocks = g[idx].T
            b0, delta = margin(d_all[idx])
            ni = non_inferiority(d_all[idx], blocks, delta=delta, alpha=ALPHA, levels_name="d")
            c = out["complexity"][idx]
            beta = (non_inferiority(c, blocks, delta=1.0, alpha=ALPHA, levels_name="C")
                    if np.unique(np.round(c, 12)).size > 1 else None)
            res[fam] = (ni, "; ".join(f"{raw['point'].values[i]}: {errors[i]}" for i in idx if errors[i]))
            for key, val in (("b", ni.b), ("b_se", ni.se), ("b0", b0), ("growth", ni.growth),
                             ("growth_se", ni.growth_se), ("ni_t", ni.t), ("ni_p", ni.p), ("ni_reject", float(ni.reject)),
                             ("ni_blocks", float(ni.n_blocks)), ("beta", beta.b if beta else np.nan),
                             ("beta_se", beta.se if beta else np.nan)):
                out[f"{fam}_{key}"] = np.asarray(val, dtype=float)
        for fam, (verdict, reason) in verdicts(res).items():
            out[f"{fam}_verdict"], out[f"{fam}_reason"] = np.array(verdict), np.array(reason)
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "seed_split": SEED_SPLIT, **protocol_attrs(),
                "analysis": "confirmatory" if not cfg.get("quick") else "quick (CI) design: not the confirmatory run"}

    def report_sections(self, doc, ds):  # simkit/report/capacity.py, for the replication (a subclass) too
        from simkit.report.spec import study_sections
        study_sections("capacity")(doc, ds, study=self)

    def summary_text(self, ds) -> str:
        lines = [f"{'point':<16}{'P':>6}{'n':>7}{'C':>8}{'E[G] (cv)':>24}{'nG/P':>8}{'conv':>6}"]
        for i, p in enumerate(ds["point"].values):
            m, s = ds["gap_cv"].values[i], ds["gap_cv_mcse"].values[i]
            lines.append(f"{p:<16}{ds['n_params'].values[i]:>6.0f}{ds['n'].values[i]:>7.0f}"
                         f"{ds['complexity'].values[i]:>8.4f}{m:>13.5f} ± {s:<8.5f}{ds['scaled_gap'].values[i]:>8.3f}"
                         f"{ds['converged'].values[i]:>6.2f}")
        for row in self.claim_rows(ds):
            lines.append(f"{row['claim']}: {row['verdict']} -- {row['detail']}")
        return "\n".join(lines)


STUDY = Capacity()


# ----------------------------------------------------------------------------------------------
# the replication (protocols/capacity_replication.md): fresh random numbers, the control at n >= P(d)

PROTOCOL_REPLICATION = "protocols/capacity_replication.md"
#: the replication's positive-control n: >= P(d) = d(d + 1)/2 - 1 on d = 4..32 (P(32) = 527)
N_CONTROL_REPLICATION = 1080
CHECKS_REPLICATION = tuple(
    dataclasses.replace(c, protocol=PROTOCOL_REPLICATION,
                        statistic=lambda ds, s=c.statistic: s(ds).replace(PROTOCOL_PATH, PROTOCOL_REPLICATION))
    for c in CHECKS)


class CapacityReplication(Capacity):
    """``capacity`` under protocols/capacity_replication.md: the same design, rule and code but the study name
    (every seed is keyed by it, so every cell draws fresh random numbers), the seed, and the positive
    control's n (1080 >= P(d) at every d; at n = 280 < P(32) = 527 the control is over-parameterised and one
    of its trainings reached a singular W)."""

    name = "capacity_replication"
    title = "Claim C6 (confirmatory replication): the generalisation gap follows the complexity term, not d"
    checks = CHECKS_REPLICATION
    default_seed = 20261206
    ademp = {**Capacity.ademp, "aim": Capacity.ademp["aim"].replace(PROTOCOL_PATH, PROTOCOL_REPLICATION)
             + "; a replication on fresh random numbers with the control at n >= P(d)"}
    params = {**Capacity.params,
              "n_control": dataclasses.replace(Capacity.params["n_control"], default=N_CONTROL_REPLICATION)}

    def attrs(self, cfg):
        out = super().attrs(cfg)
        out["seed_split"] = out["seed_split"].replace("'capacity'", f"'{self.name}'")
        return {**out, **protocol_attrs(path=PROTOCOL_REPLICATION)}


STUDY_REPLICATION = CapacityReplication()
