"""Claim C6, confirmatory: the generalisation gap of an ERM embedding does not grow with the embedding dimension d.

Pre-registered in ``protocols/dimension.md`` (committed before the confirmatory run; its path, SHA-256
and commit are global attributes of the dataset). The two-sided trend result of
``studies/generalisation.py`` stays reported there, as exploratory.

At fixed parameter count and parameter-Lipschitz constant (the "fourier" family of
simkit.embeddings.lifted.FourierEmbedding, its frame redrawn in every block), the primary test is
one-sided non-inferiority of the OLS slope b of log2 E[G](d) on log2 d, H0: growth 2^b - 1 >= DELTA per
doubling of d, with jackknife SE over independent blocks. The positive control is the linear family at
tau_d = tau sqrt(D_REF / d), whose score range grows like sqrt(d) (at fixed tau the linear class would be
no control: its scores depend on W only through the 3 x 3 Gram matrix). The ADEMP statement is the class
attribute ``Dimension.ademp`` (stored in the dataset); in full: docs/design.md, "studies/dimension".

Run it: ``simkit run dimension`` (the pre-registered design) or ``simkit run dimension --quick`` (CI).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import xarray as xr

from simkit import Uniform, VMFKernel, exact
from simkit.stats.analysis import mean_mcse
from simkit.stats.trend import NonInferiority, non_inferiority, non_inferiority_miss_rate, relative_trend_se, trend_test
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.lifted import FourierEmbedding, LiftedRisk
from simkit.estimators.population import paired_risk_difference
from simkit.exact.bounds import control_tau
from simkit.claims.protocol import protocol_attrs as _protocol_attrs
from simkit.runner import Check, Param, Study, Var, block_of, common_seeds
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train

__all__ = ["STUDY", "SCHEMA", "CHECKS", "ALPHA", "DELTA", "B0", "FAMILIES", "PROTOCOL_PATH", "SEED_SPLIT"]

#: one-sided level of the primary test (and of the control's rule)
ALPHA = 0.01
#: non-inferiority margin: growth of E[G] per doubling of d (a sqrt(d) factor is +41.4%)
DELTA = 0.20
#: the margin on the log2 scale: b0 = log2(1 + DELTA)
B0 = math.log2(1.0 + DELTA)
FAMILIES = ("fourier", "linear")
#: the positive control's reference dimension: tau_d = tau * sqrt(D_REF / d)
D_REF = 8
P_DIM = 3
PROTOCOL_PATH = "protocols/dimension.md"
_ROOT = Path(__file__).resolve().parent.parent
#: cap on evaluated points x d values per chunk (bounds memory at d = 1024)
_CHUNK_VALUES = 1 << 22


# ----------------------------------------------------------------------------------------------
# seeds and protocol provenance

SEED_SPLIT = ("per block: SeedSequence(seed, spawn_key=(*cell_key('dimension', {'design': 'blocks'}), 1, block))"
              ".spawn(4) -> sample, frame, init, evaluation; shared by every (family, d) of the block")
#: the cells that share a block's seeds (simkit.runner.common_seeds): all of them
SEED_GROUP = {"design": "blocks"}


def protocol_attrs(root: Path = _ROOT, path: str = PROTOCOL_PATH) -> dict[str, str]:
    """The protocol's provenance attributes (:func:`simkit.claims.protocol.protocol_attrs`)."""
    return _protocol_attrs(path, root)


# ----------------------------------------------------------------------------------------------
# the dataset

P, PB = ("point",), ("point", "block")
SE = "sd over blocks / sqrt(blocks)"


def _v(dims, long_name, description, nats=False):
    return Var(dims, f"{long_name}, in nats" if nats else long_name, "1", description)


QUANTITIES = {
    "gap": ("G, plain", True, "R_k(phi_hat) - R_hat(phi_hat), R_k paired with the identity on fresh tuples"),
    "gap_cv": ("G, control variate", True, "G + R_hat(id) - R_k(id) (exactly zero-mean control); the estimate of G"),
    "gap_eval_mcse": ("evaluation MCSE of G", True, "MCSE of the paired R_k difference within a block"),
    "risk_excess": ("R_k(phi_hat) - R_k(identity)", True, "paired on fresh tuples (identity at tau)"),
    "train_risk": ("R_hat(phi_hat)", True, "empirical risk of the trained embedding"),
    "converged": ("L-BFGS-B converged", False, "1 if the success flag was set"),
    "iterations": ("L-BFGS-B iterations", False, "of the one start"),
    "grad_norm": ("final gradient norm", False, "max abs component"),
    "skipped": ("block not run", False, "1 for a control block beyond n_blocks_control (all other values NaN)"),
    "tau_train": ("temperature of phi_hat", False, "tau (fourier) or tau sqrt(D_REF / d) (linear control)"),
}
BLOCK_VARS = tuple(QUANTITIES)
SUMMARY_VARS = ("gap_cv", "gap", "gap_eval_mcse", "risk_excess", "train_risk", "converged", "iterations", "tau_train")

F = ()


def _family_schema() -> dict:
    out = {
        "b": _v(F, "slope b of log2 E[G] on log2 d", "OLS on the block-mean curve over the d grid (primary estimand)"),
        "b_se": _v(F, "jackknife SE of b", "delete-one-block jackknife"),
        "growth": _v(F, "growth of E[G] per doubling of d", "2^b - 1"),
        "growth_se": _v(F, "SE of growth", "delta method: ln 2 * 2^b * b_se"),
        "ni_t": _v(F, "non-inferiority t statistic", "(b - log2(1 + delta)) / b_se, n_blocks - 1 df"),
        "ni_p": _v(F, "one-sided p-value of non-inferiority", "P(T <= ni_t); H0: growth >= delta"),
        "ni_reject": _v(F, "non-inferiority shown", "1 if ni_p < alpha (growth < delta per doubling)"),
        "ni_blocks": _v(F, "blocks in the test", "finished blocks"),
        "trend": _v(F, "secondary: trend of E[G] per doubling of d", "mean of per-block OLS slopes of G on log2 d",
                    nats=True),
        "trend_se": _v(F, "SE of trend", "sd of the per-block slopes / sqrt(blocks)", nats=True),
        "trend_t": _v(F, "t of trend", "two-sided, H0: trend = 0 (descriptive)"),
        "trend_p": _v(F, "two-sided p of trend", "descriptive, not a verdict"),
        "trend_level": _v(F, "mean E[G] over the grid", "for the relative trend", nats=True),
        "rel_trend": _v(F, "trend relative to E[G]", "trend / trend_level per doubling"),
        "rel_trend_se": _v(F, "SE of rel_trend", "delete-one-block jackknife of the ratio"),
    }
    names = {"fourier": "primary (fourier)", "linear": "positive control (linear)"}
    return {f"{fam}_{k}": v.like(long_name=f"{names[fam]}: {v.long_name}") for fam in FAMILIES for k, v in out.items()}


SCHEMA = {
    **{f"raw_{n}": _v(PB, f"per-block {ln}", d, nats) for n, (ln, nats, d) in QUANTITIES.items()},
    **{f"prep_{n}": _v(P, f"per-point constant {n}", "exact value from the prepare stage", nats=True)
       for n in ("risk_id", "ce_id", "gap_id")},
    **{n: _v(P, f"E[{QUANTITIES[n][0]}]" if n.startswith("gap") else QUANTITIES[n][0], "mean over blocks; "
             + QUANTITIES[n][2], QUANTITIES[n][1]) for n in SUMMARY_VARS},
    **{f"{n}_mcse": _v(P, f"MCSE of {n}", SE, QUANTITIES[n][1]) for n in SUMMARY_VARS},
    "gap_sd": _v(P, "sd of G over blocks", "replicate-to-replicate sd of G_cv", nats=True),
    "n_finished": _v(P, "finished blocks", "blocks run and finite"),
    "n_params": _v(P, "trainable parameters", "9 (fourier) or 3 d (linear)"),
    **_family_schema(),
    "verdict": _v((), "confirmatory C6 verdict", "pass when the primary non-inferiority test rejects at alpha"),
    "verdict_reason": _v((), "why the primary check did not pass", "empty when it passed"),
    "control_verdict": _v((), "positive-control verdict", "pass when the control does NOT pass the same rule"),
    "control_reason": _v((), "why the control check did not pass", "empty when it passed"),
    "point": _v(P, "design point", "family:d"),
    "family": _v(P, "embedding family", "fourier (primary: 9 parameters, frame redrawn per block, tau) or linear "
                 "(positive control: W x / |W x|, 3 d parameters, at tau sqrt(D_REF / d))"),
    "n": _v(P, "training tuples n", "size of the training sample"),
    "k": _v(P, "negatives per tuple k", "InfoNCE negatives"),
    "tau": _v(P, "temperature tau", "score phi(x).phi(y)/tau"),
    "d": _v(P, "embedding dimension d", "phi maps S^2 into S^(d-1)"),
    "kappa_m": _v(P, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M)"),
}


# ----------------------------------------------------------------------------------------------
# the checks

def _scalar(ds, name):
    return ds[name].values.item() if name in ds.variables else np.nan


def _sha(ds):
    return str(ds.attrs.get("protocol_sha256", "?"))


def _fam_eval(ds, fam, verdict_name, reason_name):
    g = lambda n: _scalar(ds, f"{fam}_{n}")  # noqa: E731
    detail = (f"{fam}: b = {g('b'):.4f} ± {g('b_se'):.4f} (growth {100 * g('growth'):+.1f}% ± "
              f"{100 * g('growth_se'):.1f}% per doubling), t = {g('ni_t'):.2f} on {int(g('ni_blocks')) - 1} df, "
              f"one-sided p = {g('ni_p'):.3g} against growth >= {100 * DELTA:g}%; secondary trend "
              f"{g('trend'):+.5f} ± {g('trend_se'):.5f} nat per doubling ({100 * g('rel_trend'):+.1f}% ± "
              f"{100 * g('rel_trend_se'):.1f}% of E[G]), two-sided p {g('trend_p'):.3g}")
    verdict, reason = str(_scalar(ds, verdict_name)), str(_scalar(ds, reason_name))
    return {"estimate": g("growth"), "estimate_mcse": g("growth_se"), "verdict": verdict,
            "detail": detail + (f" -> {verdict} ({reason})" if reason else f" -> {verdict}")}


#: the conservative per-block sd of b of protocols/dimension.md section 5, used only for the planned power
SIGMA_B_PLANNED = 0.078


def _planned_false_fail(ds) -> float:
    """False-failure rate of the primary rule: 1 - its planned power at zero growth for the dataset's block
    count with the protocol's conservative sigma_b (simkit.stats.trend.non_inferiority_miss_rate). The
    test's alpha is its false-PASS rate: the probability of declaring non-inferiority although growth >= delta."""
    n = int(_scalar(ds, "fourier_ni_blocks")) if np.isfinite(_scalar(ds, "fourier_ni_blocks")) else 0
    return non_inferiority_miss_rate(n, delta=DELTA, alpha=ALPHA, sigma_b=SIGMA_B_PLANNED)


CHECKS = (
    Check("C6", lambda ds: f"pre-registered rule (protocols/dimension.md, sha256 {_sha(ds)[:16]}…): growth 2^b - 1 of E[G] "
          f"per doubling of d (Fourier lift, 9 parameters, Lipschitz 1/sqrt(3), frame redrawn per block), one-sided "
          f"non-inferiority t test of H0 growth >= {100 * DELTA:g}% at {ALPHA:g} (jackknife SE); stated rate: "
          f"1 - planned power at zero growth (sigma_b {SIGMA_B_PLANNED:g}, protocol section 5; {ALPHA:g} is the "
          f"false-pass rate)",
          lambda ds: _fam_eval(ds, "fourier", "verdict", "verdict_reason"), _planned_false_fail, protocol=PROTOCOL_PATH),
    Check("C6", lambda ds: f"pre-registered positive control (protocols/dimension.md, sha256 {_sha(ds)[:16]}…): the "
          f"same rule on linear phi = Wx/|Wx| (3d parameters) at tau_d = tau sqrt({D_REF}/d) (score range grows like "
          f"sqrt d) must NOT show growth < {100 * DELTA:g}%; stated rate: {ALPHA:g}, the bound when the control's "
          f"growth is >= {100 * DELTA:g}%",
          lambda ds: _fam_eval(ds, "linear", "control_verdict", "control_reason"), ALPHA, protocol=PROTOCOL_PATH),
)


# ----------------------------------------------------------------------------------------------
# the study

class Dimension(Study):
    name = "dimension"
    claim = "C6"
    title = "Claim C6 (confirmatory): the generalisation gap does not grow with the embedding dimension"
    cell_dim = "point"
    ademp = {
        "aim": "C6: no explicit dependence of G on d; primary one-sided non-inferiority H0: growth of E[G] >= "
               f"{100 * DELTA:g}% per doubling of d (protocols/dimension.md)",
        "data": "uniform pi on S^2, vMF(x, kappa_M) positives, k i.i.d. negatives; ERM over the 9-parameter Fourier "
                "lift with its frame redrawn in every block (primary) and over linear phi = Wx/|Wx| (3d parameters) "
                "at temperature tau sqrt(8/d) (positive control); common random numbers within a block",
        "estimand": "b = slope of log2 E[G] on log2 d; growth 2^b - 1 per doubling",
        "methods": "L-BFGS-B ERM; R_k paired with the identity (exact R_k(id)); zero-mean control variate; "
                   "jackknife SE of b; one-sided t test at ALPHA",
        "performance": "E[G] with MCSE per (family, d); b, growth, t, p; positive control; secondary two-sided trend",
    }
    schema = SCHEMA
    checks = CHECKS
    default_seed = 20261202
    params = {
        "n_blocks": Param("n_blocks", int, 32, "replicate blocks (pre-registered)", low=3, high=10000, quick=3),
        "n_blocks_control": Param("n_blocks_control", int, 32, "blocks of the positive control (the first ones)",
                                  low=3, high=10000, quick=3),
        "ds": Param("ds", int, "8,16,32,64,128,256,512,1024", "embedding dimensions (even, >= 6)", quick="8,32,128",
                    multi=True, min_items=3, low=6, multiple_of=2, items_doc="even dimensions >= 6"),
        "n": Param("n", int, 128, "training tuples", low=8, high=1 << 16, quick=48),
        "k": Param("k", int, 8, "negatives per tuple", low=1, high=4096, quick=4),
        "tau": Param("tau", float, 0.1, "temperature", low=0.01, high=10.0),
        "kappa_m": Param("kappa_m", float, 10.0, "kernel concentration kappa_M", low=0.5, high=200.0),
        "eval_tuples": Param("eval_tuples", int, 4096, "fresh tuples of the paired R_k evaluation", low=64,
                             high=1 << 22, quick=512),
        "maxiter": Param("maxiter", int, 2000, "L-BFGS-B iteration limit", low=10, high=100000, quick=300),
    }

    def check_config(self, cfg):
        if cfg["n_blocks_control"] > cfg["n_blocks"]:
            raise ValueError(f"'n_blocks_control' must be <= n_blocks = {cfg['n_blocks']}, "
                             f"got {cfg['n_blocks_control']}")

    def cells(self, cfg):
        return [{"point": f"{fam}:d={d}", "family": fam, "d": int(d), "n": int(cfg["n"]), "k": int(cfg["k"]),
                 "tau": float(cfg["tau"]), "kappa_m": float(cfg["kappa_m"])}
                for fam in FAMILIES for d in self.params["ds"].values(cfg["ds"])]

    def block_dims(self, cfg):
        return {name: () for name in BLOCK_VARS}, {}

    def prepare(self, cell, cfg, rng):
        kernel, tau, k = VMFKernel(cell["kappa_m"]), cell["tau"], cell["k"]
        ce_id = float(exact.cross_entropy(Uniform(P_DIM), kernel, tau, rng=rng))
        gap_id = float(exact.gap_exact(kernel, P_DIM, tau, [k])[0])
        return {"ce_id": np.array(ce_id), "gap_id": np.array(gap_id), "risk_id": np.array(math.log(k) + ce_id + gap_id)}

    @staticmethod
    def initial(family: str, d: int, s_frame, s_init):
        """The block's start at dimension d. fourier: W0 ~ N(0, 1) (3 x 3) and the tight frame of
        :meth:`FourierEmbedding.frame` from a frame seed drawn from the block's ``s_frame`` (nested in d).
        linear: W with i.i.d. N(0, 1) entries, the first d rows of one row-by-row draw (nested in d)."""
        if family == "linear":
            return LinearEmbedding(np.random.default_rng(s_init).standard_normal((d, P_DIM)))
        frame_seed = int(np.random.default_rng(s_frame).integers(0, 2 ** 62))
        w0 = np.random.default_rng(s_init).standard_normal((P_DIM, P_DIM))
        return FourierEmbedding.frame(P_DIM, d, W=w0, seed=frame_seed)

    @staticmethod
    def train_tau(family: str, tau: float, d: int) -> float:
        """tau (primary) or tau sqrt(D_REF / d) (positive control, simkit.exact.bounds.control_tau)."""
        return float(tau) if family == "fourier" else control_tau(tau, d, D_REF)

    def generate(self, cell, cfg, prep, rng):
        """One training set of the block; its seeds (:data:`SEED_SPLIT`) are shared by every cell of the block."""
        block = block_of(rng)
        out = {name: np.nan for name in BLOCK_VARS}
        if cell["family"] == "linear" and block >= cfg["n_blocks_control"]:
            out["skipped"] = 1.0
            return {name: np.asarray(v, dtype=float) for name, v in out.items()}
        s_sample, s_frame, s_init, s_eval = common_seeds(cfg["seed"], self.name, SEED_GROUP, block, 4)
        pi, kernel, tau, k, d = Uniform(P_DIM), VMFKernel(cell["kappa_m"]), cell["tau"], cell["k"], cell["d"]
        sample = TrainingSample.draw(pi, kernel, cell["n"], k, rng=np.random.default_rng(s_sample))
        tau_f = self.train_tau(cell["family"], tau, d)
        risk = LiftedRisk(sample, tau_f)
        res = train(risk, self.initial(cell["family"], d, s_frame, s_init), restarts=1, maxiter=cfg["maxiter"])
        phi, ident = res.embedding, LinearEmbedding.identity(P_DIM)
        train_risk = risk.value(phi)
        train_risk_id = EmpiricalRisk(sample, tau).value(ident)
        n_eval = int(cfg["eval_tuples"])
        chunk = max(1, _CHUNK_VALUES // (d * (k + 2)))
        # phi_hat at its own temperature, paired with the identity at tau (whose R_k is exact)
        diff, diff_mcse = paired_risk_difference(phi, ident, pi, kernel, k, n_eval, tau=tau_f, reference_tau=tau,
                                                 chunk=chunk, rng=s_eval, risk=LiftedRisk)
        risk_id = float(prep["risk_id"])
        gap = risk_id + diff - train_risk
        out.update(gap=gap, gap_cv=gap + train_risk_id - risk_id, gap_eval_mcse=diff_mcse, risk_excess=diff,
                   train_risk=train_risk, converged=float(res.report.converged),
                   iterations=float(res.report.iterations), grad_norm=res.report.grad_norm, skipped=0.0,
                   tau_train=tau_f)
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        out = {}
        for name in SUMMARY_VARS:
            out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{name}"].values, axis=1)
        g = raw["raw_gap_cv"].values
        finished = np.sum(np.isfinite(g), axis=1)
        out["gap_sd"] = out["gap_cv_mcse"] * np.sqrt(finished)
        out["n_finished"] = finished.astype(float)
        for name in ("risk_id", "ce_id", "gap_id"):
            out[f"prep_{name}"] = raw[f"prep_{name}"].values
        fams = raw["family"].values.astype(str)
        d_all = raw["d"].values.astype(float)
        out["n_params"] = np.where(fams == "fourier", 9.0, 3.0 * d_all)
        errors = [str(e) for e in raw["cell_error"].values] if "cell_error" in raw else [""] * fams.size
        res = {}
        for fam in FAMILIES:
            idx = np.flatnonzero(fams == fam)
            blocks = g[idx].T  # (blocks, d)
            ni = non_inferiority(d_all[idx], blocks, delta=DELTA, alpha=ALPHA, levels_name="d")
            # secondary (descriptive): mean of per-block OLS slopes of G on log2 d, two-sided
            tt = trend_test(np.log2(d_all[idx]), blocks, alternative="two-sided", alpha=ALPHA, power=0.9)
            s, se, t, p = tt.slope, tt.se, tt.t, tt.p
            ok = blocks[np.all(np.isfinite(blocks), axis=1)]
            level = float(np.mean(ok)) if ok.size else np.nan
            rel_se = relative_trend_se(np.log2(d_all[idx]), blocks)
            err = "; ".join(f"{raw['point'].values[i]}: {errors[i]}" for i in idx if errors[i])
            res[fam] = (ni, err)
            for key, val in (("b", ni.b), ("b_se", ni.se), ("growth", ni.growth), ("growth_se", ni.growth_se),
                             ("ni_t", ni.t), ("ni_p", ni.p), ("ni_reject", float(ni.reject)),
                             ("ni_blocks", float(ni.n_blocks)), ("trend", s), ("trend_se", se), ("trend_t", t),
                             ("trend_p", p), ("trend_level", level), ("rel_trend", s / level if level else np.nan),
                             ("rel_trend_se", rel_se)):
                out[f"{fam}_{key}"] = np.asarray(val, dtype=float)
        verdict, reason = verdicts(*res["fourier"], *res["linear"])
        out.update(verdict=np.array(verdict[0]), verdict_reason=np.array(reason[0]),
                   control_verdict=np.array(verdict[1]), control_reason=np.array(reason[1]))
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "delta": DELTA, "b0": B0, "seed_split": SEED_SPLIT, **protocol_attrs(),
                "analysis": "confirmatory" if not cfg.get("quick") else "quick (CI) design: not the confirmatory run"}

    def summary_text(self, ds) -> str:
        lines = [f"{'point':<16}{'params':>8}{'E[G] (cv)':>24}{'conv':>6}"]
        for i, p in enumerate(ds["point"].values):
            m, s = ds["gap_cv"].values[i], ds["gap_cv_mcse"].values[i]
            lines.append(f"{p:<16}{ds['n_params'].values[i]:>8.0f}{m:>13.5f} ± {s:<8.5f}{ds['converged'].values[i]:>6.2f}")
        for row in self.claim_rows(ds):
            lines.append(f"{row['claim']}: {row['verdict']} -- {row['detail']}")
        return "\n".join(lines)


def verdicts(primary: NonInferiority, primary_err: str, control: NonInferiority, control_err: str):
    """The verdict rule of protocols/dimension.md section 7: (primary, control) verdicts and reasons."""
    if primary_err:
        v0, r0 = "error", f"task errors: {primary_err}"
    elif not primary.defined:
        v0, r0 = "fail", "b undefined (a mean G <= 0 or fewer than 3 blocks): non-inferiority not shown"
    elif primary.reject:
        v0, r0 = "pass", ""
    else:
        v0, r0 = "fail", (f"growth {100 * primary.growth:+.1f}% per doubling: non-inferiority to +{100 * DELTA:g}% "
                          f"not shown (p = {primary.p:.3g} >= {ALPHA:g})")
    if control_err:
        v1, r1 = "error", f"task errors: {control_err}"
    elif control.defined and not control.reject:
        v1, r1 = "pass", ""
    else:
        v1, r1 = "fail", ("the positive control passed the non-inferiority rule (p = "
                          f"{control.p:.3g}): the design cannot detect growth; C6 not confirmed (inconclusive)"
                          if control.defined else "control b undefined: the design cannot detect growth")
    return (v0, v1), (r0, r1)


STUDY = Dimension()
