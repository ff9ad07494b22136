"""Claims C3 and C4 at the level of bounds: the paper's averaging bound beside the earlier max/Lipschitz bound.

Pre-registered in ``protocols/bounds.md``. On the same trained phi_hat (linear class phi_W = Wx/|Wx| on S^2,
uniform pi, vMF positives, ERM at k_train negatives) and the same samples, for every k = 1, 2, ..., k_max and
every n, the study evaluates two bounds on E[G] with explicit constants (simkit.exact.bounds, docs/theory.md
sections 13 and 18): ``bound_averaging`` (the net on the loss class with the k-free Lipschitz constant of the
softmax average) and ``bound_max`` (the earlier route: a vector contraction over the k score differences,
whose constant grows like sqrt(k)), and estimates the realised gap E[G], G = R_k(phi_hat) - R_hat_{n,k}(phi_hat)
(paired with phi = identity; an exactly zero-mean control). The bounds are deterministic functions of
(n, k, tau) and the class constants; what is random is the realised gap and whether every phi_hat lies in
the class Theta_s. For C4 (Prop. 4), on the same phi_hat and fresh tuples moved to psi = phi_hat + eps
||W|| e, it sets B_avg against B_max (simkit.exact.loss_bounds) and both against |Delta l|.

Run it: ``simkit run bounds`` (or ``python -m simkit run bounds``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from simkit import Uniform, VMFKernel
from simkit.claims.protocol import protocol_attrs
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.perturbation import perturb
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train
from simkit.estimators.infonce import k_grid
from simkit.estimators.prefix import prefix_losses
from simkit.exact.bounds import bound_averaging, bound_max, linear_class_constants
from simkit.exact.loss_bounds import TOL_ABS, TOL_REL, loss_difference_bounds
from simkit.runner import Check, Param, Study, Var
from simkit.stats.analysis import combine_verdicts, mean_mcse, ratio_of_means
from simkit.stats.trend import log2_slope, trend_test

__all__ = ["STUDY", "SCHEMA", "PROTOCOL_PATH", "ISO_MIN", "GROWTH_MAX_MIN", "GROWTH_AVG_MAX", "Z_ABOVE", "P_DIM"]

PROTOCOL_PATH = "protocols/bounds.md"
P_DIM = 3
#: the class Theta_s of the bounds: sigma_min(W) / sigma_max(W) >= ISO_MIN (docs/theory.md section 13)
ISO_MIN = 0.2
CLASS = linear_class_constants(P_DIM, ISO_MIN)
#: the primary rule (protocols/bounds.md): bound_max grows by at least GROWTH_MAX_MIN per doubling of k and
#: bound_averaging by at most GROWTH_AVG_MAX (OLS slope of log2 bound on log2 k over k >= k_fit_min)
GROWTH_MAX_MIN = 0.30
GROWTH_AVG_MAX = 0.01
#: the bounds-above-gap check: gap + Z_ABOVE MCSE <= bound at every point (Student t tail with n_blocks - 1 df
#: per point: 1.8e-6 at 10 blocks)
Z_ABOVE = 10.0
#: the two bounds on E[G] as functions of (n, k, tau) for the class Theta_s (simkit.exact.bounds)
BOUNDS = {"averaging": lambda n, k, tau: bound_averaging(n, tau, **CLASS),
          "max": lambda n, k, tau: bound_max(n, k, tau, **CLASS)}
#: embedded points per array in the loss passes (bounds memory)
_POINTS = 1 << 19

G3, G2, SET = ("setting", "n", "k"), ("setting", "n"), ("setting",)
SK = ("setting", "k")
MCSE = "sd over blocks / sqrt(n_blocks)"


def _v(dims, long_name, description, nats=False):
    return Var(dims, f"{long_name}, in nats" if nats else long_name, "1", description)


RAW = {  # per-block outputs: name -> (extra dims, long name, nats?, description)
    "gap": (("n", "k"), "realised gap G (control variate)", True,
            "[mean_eval l_k(phi_hat) - l_k(id)] - [R_hat_{n,k}(phi_hat) - R_hat_{n,k}(id)]: E equals E[G]"),
    "train_diff": (("n", "k"), "R_hat(phi_hat) - R_hat(id)", True, "on the training sample's first n tuples"),
    "pop_diff": (("n", "k"), "R_k(phi_hat) - R_k(id), paired estimate", True, "mean over the fresh evaluation tuples"),
    "pop_mcse": (("n", "k"), "evaluation MCSE of pop_diff", True, "sd over evaluation tuples / sqrt(tuples)"),
    "isometry": (("n",), "sigma_min / sigma_max of phi_hat's W", False, "phi_hat lies in Theta_s when >= ISO_MIN"),
    "converged": (("n",), "training converged", False, "L-BFGS-B success flag of the best start (1 or 0)"),
    "c4_dl": (("k",), "mean |l_k(psi) - l_k(phi_hat)|", True, "over the block's C4 tuples"),
    "c4_bound_avg": (("k",), "mean B_avg", True, "averaging bound of docs/theory.md section 12"),
    "c4_bound_max": (("k",), "mean B_max", True, "max bound of docs/theory.md section 12"),
    "c4_viol_avg": (("k",), "tuples violating B_avg", False, "|dl| > B_avg + TOL_ABS + TOL_REL |l_k|"),
    "c4_viol_max": (("k",), "tuples violating B_max", False, "|dl| > B_max + TOL_ABS + TOL_REL |l_k|"),
    "c4_tight_avg": (("k",), "largest |dl| / B_avg", False, "over the block's tuples"),
    "c4_tight_max": (("k",), "largest |dl| / B_max", False, "over the block's tuples"),
}

SCHEMA = {
    "setting": Var(SET, "design setting", "1", "tau=<temperature>"),
    "tau": Var(SET, "temperature tau", "1", "score phi(x).phi(y) / tau"),
    "kappa_m": Var(SET, "kernel concentration kappa_M", "1", "x+ ~ vMF(x, kappa_M); pi uniform on S^2"),
    "n": Var(("n",), "training tuples n", "1", "phi_hat of n is trained on the first n tuples of one sample"),
    "k": Var(("k",), "number of negatives k", "1", "grid 1, 2, 4, ..., k_max: the first k of each tuple's negatives"),
    **{f"raw_{name}": Var(("setting", "block", *dims), f"per-block {ln}" + (", in nats" if nats else ""), "1", d)
       for name, (dims, ln, nats, d) in RAW.items()},
    "gap": _v(G3, "realised gap E[G]", "mean over blocks of the control-variate G", nats=True),
    "gap_mcse": _v(G3, "MCSE of gap", MCSE, nats=True),
    "bound_averaging": _v(G3, "averaging bound on E[G]", "simkit.exact.bounds.bound_averaging: 2 inf_eps [4 L_phi "
                          "eps / tau + (4/tau) sqrt(2 P log(1 + 4 rho/eps) / n)], no k; deterministic", nats=True),
    "bound_max": _v(G3, "max/Lipschitz bound on E[G]", "simkit.exact.bounds.bound_max: vector contraction over the k "
                    "score differences, 2 sqrt(2) inf_eps [k L_r eps + sqrt(k) (2/tau) sqrt(2 P log(1 + 4 rho/eps) / "
                    "n)]; deterministic", nats=True),
    "trivial_bound": _v(SET, "trivial bound on E[G]", "D = 4/tau: a bound above it is vacuous", nats=True),
    "ratio_averaging_gap": _v(G3, "bound_averaging / gap", "NaN where gap <= 0"),
    "ratio_max_gap": _v(G3, "bound_max / gap", "NaN where gap <= 0"),
    "growth_averaging": _v(G2, "growth of bound_averaging per doubling of k", "2^b - 1, b the OLS slope of log2 "
                           "bound on log2 k over k >= k_fit_min (deterministic)"),
    "growth_max": _v(G2, "growth of bound_max per doubling of k", "as growth_averaging (deterministic)"),
    "gap_trend": _v(G2, "trend of E[G] per doubling of k", "mean of per-block OLS slopes of G on log2 k over k >= "
                    "k_fit_min (descriptive)", nats=True),
    "gap_trend_mcse": _v(G2, "MCSE of gap_trend", MCSE, nats=True),
    "isometry_min": _v(G2, "smallest sigma_min / sigma_max over blocks", "phi_hat in Theta_s when >= ISO_MIN"),
    "in_class": _v(G2, "fraction of blocks with phi_hat in Theta_s", "sigma_min / sigma_max >= ISO_MIN"),
    "converged": _v(G2, "fraction of trainings converged", "L-BFGS-B success flag"),
    "growth_verdict": _v(G2, "verdict of the primary rule", f"pass when growth_max >= {GROWTH_MAX_MIN:g} and "
                         f"growth_averaging <= {GROWTH_AVG_MAX:g}"),
    "above_verdict": _v(G2, "verdict of the bounds-above-gap check", f"pass when every phi_hat is in Theta_s and "
                        f"gap + {Z_ABOVE:g} MCSE <= both bounds at every k"),
    "verdict": _v(SET, "verdict of the setting", "combined growth_verdict and above_verdict over n"),
    "verdict_reason": _v(SET, "why the setting did not pass", "empty when it passed"),
    **{f"c4_{q}{s}": _v(SK, ("MCSE of " if s else "") + ln, MCSE if s else "mean over tuples and blocks", nats=True)
       for q, ln in (("dl", "mean |Delta l|"), ("bound_avg", "mean B_avg"), ("bound_max", "mean B_max"))
       for s in ("", "_mcse")},
    **{f"c4_ratio_{q}{s}": _v(SK, ("MCSE of " if s else "") + ln, "delete-one-block jackknife" if s else
                              "ratio of means over tuples and blocks")
       for q, ln in (("avg_dl", "E B_avg / E |Delta l|"), ("max_dl", "E B_max / E |Delta l|"),
                     ("max_avg", "E B_max / E B_avg")) for s in ("", "_mcse")},
    **{f"c4_growth_{q}{s}": _v(SET, ("SE of " if s else "") + f"growth of E B_{q} per doubling of k",
                               "delete-one-block jackknife, delta method" if s else
                               "2^b - 1, b the OLS slope of log2 of the block-mean curve over k >= k_fit_min")
       for q in ("avg", "max") for s in ("", "_se")},
    **{f"c4_violations_{q}": _v(SK, f"tuples violating B_{q}", "count over all blocks") for q in ("avg", "max")},
    **{f"c4_tightness_{q}": _v(SK, f"largest |Delta l| / B_{q}", "over all tuples and blocks: <= 1 when the bound "
                               "holds") for q in ("avg", "max")},
}


def _growth(k, curve, k_min) -> float:
    sel = k >= k_min
    b = np.polyfit(np.log2(k[sel]), np.log2(curve[sel]), 1)[0]
    return float(2.0 ** b - 1.0)


# ----------------------------------------------------------------------------------------------
# checks

def _growth_check(ds) -> dict:
    gm, ga = ds["growth_max"].values, ds["growth_averaging"].values
    verdicts = [str(v) for v in ds["growth_verdict"].values.ravel()]
    detail = "; ".join(f"{s}, n = {int(n)}: bound_max +{100 * gm[i, j]:.1f}%, bound_averaging {100 * ga[i, j]:+.2f}% "
                       f"per doubling" for i, s in enumerate(ds["setting"].values) for j, n in enumerate(ds["n"].values))
    return {"estimate": float(np.min(gm)), "estimate_mcse": 0.0, "verdict": combine_verdicts(verdicts),
            "detail": detail}


def _above_check(ds) -> dict:
    gap, se = ds["gap"].values, ds["gap_mcse"].values
    low = np.minimum(ds["bound_averaging"].values, ds["bound_max"].values)
    upper = gap + Z_ABOVE * se
    worst = np.nanmax(upper / low)
    detail = (f"largest (gap + {Z_ABOVE:g} MCSE) / min bound {worst:.3g}; phi_hat in Theta_s in "
              f"{100 * float(np.min(ds['in_class'].values)):.0f}% of blocks at worst; smallest bound_averaging / gap "
              f"{np.nanmin(ds['ratio_averaging_gap'].values):.3g}, smallest bound_max / gap "
              f"{np.nanmin(ds['ratio_max_gap'].values):.3g}")
    return {"estimate": float(worst), "estimate_mcse": 0.0,
            "verdict": combine_verdicts([str(v) for v in ds["above_verdict"].values.ravel()]), "detail": detail}


def _c4_check(ds) -> dict:
    va, vm = int(ds["c4_violations_avg"].sum()), int(ds["c4_violations_max"].sum())
    ok = va == 0 and vm == 0 and np.isfinite(ds["c4_bound_avg"].values).all()
    return {"estimate": float(va + vm), "estimate_mcse": 0.0, "verdict": "pass" if ok else "fail",
            "detail": f"{va} tuples above B_avg, {vm} above B_max; E B_avg growth "
                      + ", ".join(f"{100 * g:+.2f}% ± {100 * s:.2f}%" for g, s in
                                  zip(ds["c4_growth_avg"].values, ds["c4_growth_avg_se"].values))
                      + " per doubling, E B_max " + ", ".join(f"{100 * g:+.2f}% ± {100 * s:.2f}%" for g, s in
                                                              zip(ds["c4_growth_max"].values,
                                                                  ds["c4_growth_max_se"].values))}


CHECKS = (
    Check("C3", f"bound_max grows >= {GROWTH_MAX_MIN:.0%} and bound_averaging <= {GROWTH_AVG_MAX:.0%} per doubling "
          f"of k (OLS on log2 k, k >= k_fit_min), every setting and n (deterministic)", _growth_check, None,
          protocol=PROTOCOL_PATH, label="bounds in k"),
    Check("C3", f"both bounds >= gap + {Z_ABOVE:g} MCSE at every (setting, n, k), every phi_hat in Theta_s",
          _above_check, lambda ds: float(ds["gap"].size * stats.t.sf(Z_ABOVE, ds.sizes["block"] - 1)), protocol=PROTOCOL_PATH,
          label="bounds above gap"),
    Check("C4", "B_avg and B_max (Prop. 4 and the max bound) hold on every tuple and k (deterministic)",
          _c4_check, None, label="Prop. 4 bounds hold"),
)


class Bounds(Study):
    name = "bounds"
    claim = "C3"
    title = "Claims C3 and C4: the averaging bound stays flat in k, the max/Lipschitz bound grows"
    cell_dim = "setting"
    schema = SCHEMA
    checks = CHECKS
    ademp = {
        "aim": "C3/C4 at the level of bounds: the paper's averaging bound on E[G] does not grow with k, the earlier "
               "max/Lipschitz (vector-contraction) bound does; both lie above the realised gap",
        "data": "pi uniform on S^2, x+ ~ vMF(x, kappa_M); linear class phi_W = Wx/|Wx| (3 x 3); one training sample "
                "of n_max tuples with k_max negatives each per block, phi_hat of n trained on its first n tuples at "
                "k_train negatives",
        "estimand": "bound_averaging, bound_max (deterministic) and E[G] over (setting, n, k); their ratios; growth "
                    "per doubling of k; for C4 E|Delta l|, E B_avg, E B_max and their ratios",
        "methods": "L-BFGS-B ERM; R_hat and R_k for every k by running log-sum-exp over each tuple's negatives; G "
                   "paired with phi = identity (exactly zero-mean control); bounds from simkit.exact.bounds; C4 "
                   "from simkit.exact.loss_bounds on psi = phi_hat moved by eps ||W|| along a random direction",
        "performance": "growth per doubling of each bound against pre-registered margins; gap + 10 MCSE against the "
                       "bounds; bound / gap ratios; every estimate with its MCSE",
    }
    params = {
        "taus": Param("taus", float, "0.1,0.5", "temperatures (one setting each)", quick="0.5", multi=True,
                      low=0.01, items_doc="temperatures >= 0.01"),
        "ns": Param("ns", int, "1024,2048", "training tuples (nested first-n subsets of one sample)", quick="128,512",
                    multi=True, low=16, high=1 << 16, items_doc="integers in 16..65536"),
        "k_max": Param("k_max", int, 4096, "largest k (power of two; grid 1, 2, ..., k_max)", low=32, high=1 << 14,
                       power_of_two=True, quick=512),
        "k_train": Param("k_train", int, 16, "negatives per tuple in the training risk", low=1, high=1 << 14),
        "k_fit_min": Param("k_fit_min", int, 16, "smallest k of the growth fits", low=1, high=1 << 13),
        "kappa_m": Param("kappa_m", float, 10.0, "kernel concentration kappa_M", low=0.5, high=200.0),
        "n_blocks": Param("n_blocks", int, 10, "replicate training samples", low=3, high=10000, quick=4),
        "eval_tuples": Param("eval_tuples", int, 1024, "fresh tuples of the paired R_k estimate", low=16,
                             high=1 << 20, quick=256),
        "c4_tuples": Param("c4_tuples", int, 256, "fresh tuples of the C4 comparison", low=8, high=1 << 16, quick=32),
        "c4_eps": Param("c4_eps", float, 0.1, "relative size of the C4 perturbation", low=0.0, low_open=True,
                        high=1.0),
        "restarts": Param("restarts", int, 2, "L-BFGS-B starts per training (best kept)", low=1, high=64, quick=1),
    }

    def check_config(self, cfg):
        if cfg["k_train"] > cfg["k_max"]:
            raise ValueError(f"'k_train' must be <= k_max = {cfg['k_max']}, got {cfg['k_train']}")
        if cfg["k_fit_min"] * 4 > cfg["k_max"]:
            raise ValueError(f"'k_fit_min' must leave at least 3 grid points up to k_max = {cfg['k_max']}, "
                             f"got {cfg['k_fit_min']}")

    def cells(self, cfg):
        return [{"setting": f"tau={t:g}", "tau": float(t), "kappa_m": float(cfg["kappa_m"])}
                for t in self.params["taus"].values(cfg["taus"])]

    def block_dims(self, cfg):
        return ({name: dims for name, (dims, *_) in RAW.items()},
                {"n": self.params["ns"].values(cfg["ns"]), "k": k_grid(cfg["k_max"])})

    def generate(self, cell, cfg, prep, rng):
        """One training sample, its trained phi_hat for every n, the gap curves and the C4 comparison."""
        ns, ks, K, tau = self.params["ns"].values(cfg["ns"]), k_grid(cfg["k_max"]), cfg["k_max"], cell["tau"]
        kt = cfg["k_train"]
        g_sample, g_tail, g_init, g_eval, g_c4 = rng.spawn(5)
        pi, kernel = Uniform(P_DIM), VMFKernel(cell["kappa_m"])
        n_max = max(ns)
        x = pi.rvs(n_max, rng=g_sample)
        xp = kernel.sample(x, rng=g_sample)
        head = pi.rvs((n_max, kt), rng=g_sample)  # the training risk's negatives: the first k_train of each tuple
        out = {name: np.full(tuple(len(ns) if d == "n" else len(ks) for d in dims), np.nan)
               for name, (dims, *_) in RAW.items()}
        embs: list = [None]  # the identity, then phi_hat of every n
        for i, n in enumerate(ns):
            init = LinearEmbedding.random(P_DIM, P_DIM, rng=np.random.default_rng(_seed_of(g_init)))
            res = train(EmpiricalRisk(TrainingSample(x[:n], xp[:n], head[:n]), tau), init,
                        restarts=cfg["restarts"], rng=np.random.default_rng(_seed_of(g_init, 1)))
            embs.append(res.embedding)
            sv = np.linalg.svd(res.embedding.W, compute_uv=False)
            out["isometry"][i], out["converged"][i] = sv[-1] / sv[0], float(res.report.converged)

        def losses(e, xa, xpa, negs):  # (tuple, k) losses of a chunk under embedding e (None: the identity)
            m = xa.shape[0]
            if e is None:  # phi = identity: the points are already unit vectors
                return prefix_losses(xa, xpa, negs, tau, ks)
            return prefix_losses(e(xa), e(xpa), e(negs.reshape(-1, P_DIM)).reshape(m, K, P_DIM), tau, ks)

        chunk = max(1, _POINTS // K)
        sizes = [n_max, *ns]  # the identity's losses on every tuple, phi_hat of n's on the first n
        train_l = [np.empty((n, len(ks))) for n in sizes]
        for lo in range(0, n_max, chunk):
            hi = min(n_max, lo + chunk)
            tail = pi.rvs((hi - lo, K - kt), rng=g_tail) if K > kt else np.empty((hi - lo, 0, P_DIM))
            negs = np.concatenate([head[lo:hi], tail], axis=1)
            for e, n, dest in zip(embs, sizes, train_l):
                if lo < n:
                    dest[lo:min(hi, n)] = losses(e, x[lo:hi], xp[lo:hi], negs)[:min(hi, n) - lo]
        ne = cfg["eval_tuples"]
        eval_d = np.empty((len(ns), ne, len(ks)))
        for lo in range(0, ne, chunk):
            m = min(ne, lo + chunk) - lo
            xe = pi.rvs(m, rng=g_eval)
            xpe, negs = kernel.sample(xe, rng=g_eval), pi.rvs((m, K), rng=g_eval)
            base = losses(None, xe, xpe, negs)
            for i, e in enumerate(embs[1:]):
                eval_d[i, lo:lo + m] = losses(e, xe, xpe, negs) - base
        for i, n in enumerate(ns):
            out["train_diff"][i] = np.mean(train_l[i + 1] - train_l[0][:n], axis=0)
            out["pop_diff"][i] = eval_d[i].mean(axis=0)
            out["pop_mcse"][i] = eval_d[i].std(axis=0, ddof=1) / math.sqrt(ne)
        out["gap"] = out["pop_diff"] - out["train_diff"]
        out.update(self._c4(embs[-1], pi, kernel, tau, ks, cfg, g_c4))
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    @staticmethod
    def _c4(phi, pi, kernel, tau, ks, cfg, rng) -> dict:
        """Prop. 4 on fresh tuples: psi = phi_hat moved by eps ||W|| e; means, violations, tightness per k."""
        psi = perturb(phi, cfg["c4_eps"], rng=rng)
        nt, K = cfg["c4_tuples"], cfg["k_max"]
        x = pi.rvs(nt, rng=rng)
        xp, y = kernel.sample(x, rng=rng), pi.rvs((nt, K), rng=rng)
        acc = {q: np.zeros(len(ks)) for q in ("dl", "bound_avg", "bound_max", "viol_avg", "viol_max")}
        tight = {q: np.zeros(len(ks)) for q in ("avg", "max")}
        step = max(1, (1 << 16) // K)
        for lo in range(0, nt, step):
            sl = slice(lo, min(nt, lo + step))
            w = y[sl].reshape(-1, P_DIM)
            m = w.shape[0] // K
            r = loss_difference_bounds(phi(x[sl]), phi(xp[sl]), phi(w).reshape(m, K, P_DIM), psi(x[sl]), psi(xp[sl]),
                                       psi(w).reshape(m, K, P_DIM), tau, ks)
            dl, allow = np.abs(r["delta"]), TOL_ABS + TOL_REL * np.abs(r["loss"])
            acc["dl"] += dl.sum(axis=0)
            for q in ("avg", "max"):
                b = r[f"bound_{q}"]
                acc[f"bound_{q}"] += b.sum(axis=0)
                acc[f"viol_{q}"] += np.sum(dl > b + allow, axis=0)
                tight[q] = np.maximum(tight[q], np.max(np.clip(dl - allow, 0.0, None) / b, axis=0))
        out = {f"c4_{q}": acc[q] / nt for q in ("dl", "bound_avg", "bound_max")}
        out.update({f"c4_viol_{q}": acc[f"viol_{q}"] for q in ("avg", "max")})
        out.update({f"c4_tight_{q}": tight[q] for q in ("avg", "max")})
        return out

    def summarise(self, raw, cfg) -> dict:
        ns, k, kmin = raw["n"].values, raw["k"].values, cfg["k_fit_min"]
        taus = raw["tau"].values
        S, N, G = len(taus), len(ns), len(k)
        out = {}
        out["gap"], out["gap_mcse"] = mean_mcse(raw["raw_gap"].values, axis=1)
        ba, bm = np.empty((S, N, G)), np.empty((S, N, G))
        for i, t in enumerate(taus):
            for j, n in enumerate(ns):
                ba[i, j] = [BOUNDS["averaging"](int(n), int(kk), float(t)) for kk in k]
                bm[i, j] = [BOUNDS["max"](int(n), int(kk), float(t)) for kk in k]
        out["bound_averaging"], out["bound_max"], out["trivial_bound"] = ba, bm, 4.0 / taus
        pos = np.where(out["gap"] > 0, out["gap"], np.nan)
        out["ratio_averaging_gap"], out["ratio_max_gap"] = ba / pos, bm / pos
        out["growth_averaging"] = np.array([[_growth(k, ba[i, j], kmin) for j in range(N)] for i in range(S)])
        out["growth_max"] = np.array([[_growth(k, bm[i, j], kmin) for j in range(N)] for i in range(S)])
        sel = k >= kmin
        tr, tr_se = np.full((S, N), np.nan), np.full((S, N), np.nan)
        for i in range(S):
            for j in range(N):
                blocks = raw["raw_gap"].values[i, :, j][:, sel]
                blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
                if blocks.shape[0] >= 3:
                    t = trend_test(np.log2(k[sel]), blocks, alternative="greater", alpha=0.01)
                    tr[i, j], tr_se[i, j] = t.slope, t.se
        out["gap_trend"], out["gap_trend_mcse"] = tr, tr_se
        iso = raw["raw_isometry"].values
        with np.errstate(invalid="ignore"):
            out["isometry_min"] = np.nanmin(iso, axis=1)
            out["in_class"] = np.mean(iso >= ISO_MIN, axis=1)
            out["converged"] = np.nanmean(raw["raw_converged"].values, axis=1)
        upper = out["gap"] + Z_ABOVE * out["gap_mcse"]
        err = np.array([bool(str(e)) for e in raw["cell_error"].values])
        gv, av, verdict, reason = [], [], [], []
        for i in range(S):
            rg, ra, why = [], [], []
            for j in range(N):
                ok_g = out["growth_max"][i, j] >= GROWTH_MAX_MIN and out["growth_averaging"][i, j] <= GROWTH_AVG_MAX
                ok_a = bool(out["in_class"][i, j] == 1.0 and np.all(np.isfinite(upper[i, j]))
                            and np.all(upper[i, j] <= np.minimum(ba[i, j], bm[i, j])))
                rg.append("error" if err[i] else "pass" if ok_g else "fail")
                ra.append("error" if err[i] else "pass" if ok_a else "fail")
                if not ok_g:
                    why.append(f"n = {int(ns[j])}: growth max {out['growth_max'][i, j]:.3f}, averaging "
                               f"{out['growth_averaging'][i, j]:.4f}")
                if not ok_a:
                    why.append(f"n = {int(ns[j])}: a bound below gap + {Z_ABOVE:g} MCSE or phi_hat outside Theta_s")
            gv.append(rg)
            av.append(ra)
            verdict.append(combine_verdicts(rg + ra))
            reason.append("; ".join(why) + ("; a task failed" if err[i] else ""))
        out.update(growth_verdict=np.array(gv, dtype=object), above_verdict=np.array(av, dtype=object),
                   verdict=verdict, verdict_reason=reason)
        for q in ("dl", "bound_avg", "bound_max"):
            out[f"c4_{q}"], out[f"c4_{q}_mcse"] = mean_mcse(raw[f"raw_c4_{q}"].values, axis=1)
        for name, (a, b) in {"avg_dl": ("bound_avg", "dl"), "max_dl": ("bound_max", "dl"),
                             "max_avg": ("bound_max", "bound_avg")}.items():
            pairs = [ratio_of_means(raw[f"raw_c4_{a}"].values[i], raw[f"raw_c4_{b}"].values[i]) for i in range(S)]
            out[f"c4_ratio_{name}"] = np.array([p[0] for p in pairs])
            out[f"c4_ratio_{name}_mcse"] = np.array([p[1] for p in pairs])
        for q in ("avg", "max"):
            fits = [log2_slope(k, raw[f"raw_c4_bound_{q}"].values[i], kmin) for i in range(S)]
            out[f"c4_growth_{q}"] = np.array([2.0 ** f[0] - 1.0 for f in fits])
            out[f"c4_growth_{q}_se"] = np.array([math.log(2.0) * 2.0 ** f[0] * f[1] for f in fits])
            out[f"c4_violations_{q}"] = np.nansum(raw[f"raw_c4_viol_{q}"].values, axis=1)
            out[f"c4_tightness_{q}"] = np.nanmax(raw[f"raw_c4_tight_{q}"].values, axis=1)
        return out

    def attrs(self, cfg):
        return {**protocol_attrs(PROTOCOL_PATH), "iso_min": ISO_MIN, "growth_max_min": GROWTH_MAX_MIN,
                "growth_avg_max": GROWTH_AVG_MAX, "z_above": Z_ABOVE}

    def summary_text(self, ds) -> str:
        k = ds["k"].values
        show = [g for g, kk in enumerate(k) if kk in (1, 16, 256, int(k[-1]))]
        lines = [f"{'setting':<10}{'n':>6}{'k':>6}{'E[G] ± MCSE':>24}{'bound_avg':>11}{'bound_max':>11}"
                 f"{'avg/gap':>10}{'max/gap':>10}"]
        for i, s in enumerate(ds["setting"].values):
            for j, n in enumerate(ds["n"].values):
                for g in show:
                    lines.append(f"{s:<10}{int(n):>6}{int(k[g]):>6}{ds['gap'].values[i, j, g]:>12.2e} ± "
                                 f"{ds['gap_mcse'].values[i, j, g]:<9.1e}{ds['bound_averaging'].values[i, j, g]:>11.3g}"
                                 f"{ds['bound_max'].values[i, j, g]:>11.3g}{ds['ratio_averaging_gap'].values[i, j, g]:>10.3g}"
                                 f"{ds['ratio_max_gap'].values[i, j, g]:>10.3g}")
        for row in (c.row(ds) for c in self.checks):
            lines.append(f"{row['claim']} [{row.get('label', '')}]: {row['verdict']} -- {row['detail']}")
        return "\n".join(lines)


def _seed_of(gen, offset: int = 0) -> np.random.SeedSequence:
    """A seed sequence derived from generator ``gen``'s own seed (the same for every n: common random numbers)."""
    return np.random.SeedSequence(gen.bit_generator.seed_seq.entropy,
                                  spawn_key=(*gen.bit_generator.seed_seq.spawn_key, 101 + offset))


STUDY = Bounds()
