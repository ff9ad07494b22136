"""The onset of the 1/k regime (pre-registered in ``protocols/onset.md``): from which k on does c1/k
describe gap_k where the expansion scale is 10^3-10^4, and does the scale predict that k?

Per setting: the exact curve gap_k on the half-octave grid k = round(2^(j/2)) <= 2^24
(simkit.exact.curve; simkit.diagnose for the digits), c1 and c2, the expansion scale rho; the onset
k* of |k gap_k / c1 - 1| <= 0.1 and of the second-order ratio, with a Monte Carlo interval where the
curve is itself Monte Carlo (simkit.stats.onset); the Monte Carlo curve at k = 1, 2, 4, ..., k_max
against the exact one (simkit.stats.truth_tests.curve_test, max-t). The protocol's question "k* in
[rho, 16 rho]?" is answered per setting (inside / outside / undetermined) and overall.

Settings: vmf-d8 (kappa_pi 2, kappa_M 10) at tau 0.02 and 0.03, rate_k's mixture-d16 (kappa_M 20) at
tau 0.03, and scikit-learn's digits (all 1797 normalised images, same-label positives) at tau 0.05.

Run it: ``simkit run onset`` (the pre-registered design) or ``--quick`` (CI; never confirmatory).
"""

from __future__ import annotations

import functools

import numpy as np

from simkit import VMFKernel, exact
from simkit.claims.protocol import protocol_attrs
from simkit.diagnose import diagnose
from simkit.distributions.designs import build_pi
from simkit.estimators.finite import gap_terms, ratio_block, scores_and_log_z
from simkit.estimators.infonce import GapEstimator, k_grid
from simkit.exact.curve import (anchor_moments, constants_from_moments, expansion_constants, gap_curve,
                                needs_monte_carlo, pool_moments)
from simkit.exact.finite import class_members
from simkit.runner import Check, Param, Study, Var
from simkit.stats.analysis import mean_mcse, truth_rng
from simkit.stats.onset import interval_position, onset_interval, onset_k, onset_ratio
from simkit.stats.truth_tests import curve_test

__all__ = ["STUDY", "SETTINGS", "ALPHA", "TOL", "PREDICTED", "exact_grid", "answer"]

PROTOCOL_PATH = "protocols/onset.md"
#: level of each setting's curve test
ALPHA = 1e-3
#: the band |ratio - 1| <= TOL defines the onset
TOL = 0.1
#: the prediction: k* in [PREDICTED[0] rho, PREDICTED[1] rho]
PREDICTED = (1.0, 16.0)
#: name -> (pi family, dim, kappa_pi, kappa_M, tau, log2 of the Monte Carlo k_max); "digits" is the data set
SETTINGS = {
    "vmf-d8-t0.02": ("vmf", 8, 2.0, 10.0, 0.02, 17),
    "vmf-d8-t0.03": ("vmf", 8, 2.0, 10.0, 0.03, 15),
    "mixture-d16-t0.03": ("mixture", 16, 6.0, 20.0, 0.03, 18),
    "digits-pixels-t0.05": ("digits", 64, 0.0, 0.0, 0.05, 12),
}

S, K, KE = ("setting",), ("setting", "k"), ("setting", "k_exact")


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


def exact_grid(n_half_octaves: int) -> np.ndarray:
    """The distinct k = round(2^(j/2)), j = 0..n_half_octaves (the powers of two are the even j)."""
    return np.unique(np.round(2.0 ** (np.arange(n_half_octaves + 1) / 2.0)).astype(np.int64))


def answer(positions) -> str:
    """The protocol's answer: "yes" if every setting is inside, "no" if any is outside, else "undetermined"."""
    pos = [str(p) for p in positions]
    if pos and all(p == "inside" for p in pos):
        return "yes"
    return "no" if "outside" in pos else "undetermined"


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    unit = np.asarray(images, dtype=float)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    unit.flags.writeable = False
    return unit, np.asarray(labels, dtype=np.int64)


@functools.lru_cache(maxsize=8)
def _exact_quadrature(family: str, dim: int, kappa_pi: float, kappa_m: float, tau: float, ks: tuple) -> dict:
    """Exact curve and constants of a setting with an exact rule over x (no randomness: cached)."""
    if family == "digits":
        unit, labels = _digits()
        dg = diagnose(unit, labels=labels, tau=tau, k_grid=list(ks), k_max=int(ks[-1]), n_exact_anchors=unit.shape[0],
                      n_anchors=unit.shape[0], n_tuples=64, n_blocks=3, mc_k_max=4, convention="include_anchor").to_xarray()
        out = {n: np.asarray(dg[n].values, dtype=float) for n in ("c1", "c1_mcse", "c2", "c2_mcse")}
        out["gap_exact"] = np.asarray(dg["gap_exact"].sel(k=list(ks)).values, dtype=float)
        out["rho"] = np.asarray(dg["expansion_scale"].values, dtype=float)
    else:
        pi, kernel = build_pi({"pi": family, "dim": dim, "kappa_pi": kappa_pi}), VMFKernel(kappa_m)
        consts = expansion_constants(pi, kernel, tau)
        out = {"c1": consts["c1"], "c2": consts["c2"], "c1_mcse": 0.0, "c2_mcse": 0.0,
               "gap_exact": gap_curve(pi, kernel, tau, np.asarray(ks)).gap, "rho": max(exact.expansion_scales(pi, kernel, tau))}
    out["gap_exact_cov"] = np.zeros((len(ks), len(ks)))
    return {n: np.asarray(v, dtype=float) for n, v in out.items()}


SCHEMA = {
    "raw_gap": _v(("setting", "block", "k"), "per-block control-variate gap, in nats", "vMF settings: GapEstimator "
                  "gap_cv; digits: log((e^s+ + S_k)/(kZ)) - (S_k/(kZ) - 1) per tuple (simkit.estimators.finite.gap_terms); "
                  "NaN beyond the setting's k_max"),
    "prep_coef": _v(("setting", "coef_dim0", "coef_dim1"), "control-variate coefficients", "GapEstimator pilot "
                    "(vMF settings); unused for digits"),
    **{f"prep_{n}": _v(S, f"per-setting constant {n}", "prepare stage") for n in ("c1", "c1_mcse", "c2", "c2_mcse", "rho")},
    "prep_gap_exact": _v(("setting", "gap_exact_dim0"), "exact gap on k_exact, in nats", "prepare stage"),
    "prep_gap_exact_cov": _v(("setting", "gap_exact_cov_dim0", "gap_exact_cov_dim1"), "covariance of the exact gap "
                             "across k_exact (nats squared)", "zero where the curve is exact"),
    "gap": _v(K, "Monte Carlo gap R_k - log k - CE, in nats", "mean over blocks of raw_gap"),
    "gap_mcse": _v(K, "MCSE of gap, in nats", "sd over blocks / sqrt(n_blocks)"),
    "k_gap_ratio": _v(K, "Monte Carlo k gap_k / c1", "approaches 1 as k grows"),
    "k_gap_ratio_mcse": _v(K, "MCSE of k_gap_ratio", "k gap_mcse / |c1|"),
    "gap_exact_k": _v(K, "exact gap at the Monte Carlo k, in nats", "gap_exact at the powers of two"),
    "ratio_exact_k": _v(K, "exact k gap_k / c1 at the Monte Carlo k", "for the curve panels"),
    "gap_exact": _v(KE, "exact gap, in nats", "simkit.exact.curve (vMF: quadrature; mixture: Monte Carlo over "
                    "anchors with exact inner integrals) or simkit.diagnose over all digits rows (exact)"),
    "gap_exact_mcse": _v(KE, "MCSE of gap_exact, in nats", "0 where exact"),
    "ratio_exact": _v(KE, "exact k gap_k / c1", "the onset's first-order ratio"),
    "ratio2_exact": _v(KE, "exact gap_k / (c1/k + c2/k^2)", "the onset's second-order ratio"),
    "c1": _v(S, "c1, in nats", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.curve.expansion_constants; diagnose)"),
    "c1_mcse": _v(S, "MCSE of c1, in nats", "0 where exact"),
    "c2": _v(S, "c2, in nats", "second-order constant (docs/theory.md section 8)"),
    "c2_mcse": _v(S, "MCSE of c2, in nats", "0 where exact"),
    "expansion_scale": _v(S, "expansion scale rho", "max(E[Z2/Z^2], E[m1/Z]) (simkit.exact.expansion_scales)"),
    "crossover": _v(S, "crossover |c2/c1|", "where c2/k^2 equals c1/k (docs/theory.md section 9)"),
    "onset_k": _v(S, "onset k* of the 1/k regime", f"smallest k_exact from which |k gap_k / c1 - 1| <= {TOL:g} at "
                  "every larger k_exact (simkit.stats.onset.onset_k); inf if none"),
    "onset_k_low": _v(S, "onset_k, 95% interval, lower", "percentile of the onset over draws of the curve and c1 "
                      "from their Monte Carlo error (simkit.stats.onset.onset_interval); onset_k where exact"),
    "onset_k_high": _v(S, "onset_k, 95% interval, upper", "as onset_k_low"),
    "onset_k_second_order": _v(S, "onset of c1/k + c2/k^2", f"as onset_k with gap_k / (c1/k + c2/k^2); tolerance {TOL:g}"),
    "onset_k_second_order_low": _v(S, "onset_k_second_order, 95% interval, lower", "as onset_k_low"),
    "onset_k_second_order_high": _v(S, "onset_k_second_order, 95% interval, upper", "as onset_k_low"),
    "onset_over_scale": _v(S, "onset_k / expansion_scale", "the protocol predicts [1, 16]"),
    "predicted_low": _v(S, "predicted onset range, lower", f"{PREDICTED[0]:g} x expansion_scale"),
    "predicted_high": _v(S, "predicted onset range, upper", f"{PREDICTED[1]:g} x expansion_scale (the fit rule's k_min)"),
    "scale_predicts": _v(S, "position of the onset interval in the predicted range", "inside, outside or undetermined "
                         "(simkit.stats.onset.interval_position)"),
    "onset_within_rule": _v(S, "onset_k_high <= 16 x expansion_scale", "1 when the fit rule's k_min is in the 1/k "
                            "regime, else 0 (secondary, descriptive)"),
    "curve_max_t": _v(S, "largest studentised deviation of the Monte Carlo curve from the exact curve",
                      "simkit.stats.truth_tests.curve_test(reference='max-t') over k = 1..k_max"),
    "curve_p": _v(S, "p-value of curve_max_t", "Efron bootstrap of the blocks (9999 resamples), the exact curve's "
                  "covariance included; rng simkit.stats.analysis.truth_rng(seed, setting)"),
    "k_max": _v(S, "largest Monte Carlo k", "per setting"),
    "n_blocks_done": _v(S, "finished blocks", "blocks entering the Monte Carlo curve"),
    "verdict": _v(S, "verdict of the curve test", f"pass if curve_p >= {ALPHA:g}, fail otherwise, error if a task failed"),
    "verdict_reason": _v(S, "why a setting failed", "empty when it passed"),
    "k": _v(("k",), "number of negatives k (Monte Carlo grid)", "1, 2, 4, ..., the largest k_max"),
    "k_exact": _v(("k_exact",), "number of negatives k (exact grid)", "round(2^(j/2)), j = 0..n_half_octaves"),
    "setting": _v(S, "design setting", "see the module docstring"),
    "pi": _v(S, "data distribution family", "vmf (mean e_1), mixture (rate_k's) or digits (uniform over rows)"),
    "dim": _v(S, "ambient dimension d", "points on S^{d-1}"),
    "kappa_pi": _v(S, "concentration of pi", "0 for digits"),
    "kappa_m": _v(S, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M); 0 for digits (same-label kernel)"),
    "tau": _v(S, "temperature tau", "score s(x, y) = phi(x).phi(y) / tau"),
}


def _curve_check(ds) -> dict:
    p = ds["curve_p"].values
    worst = int(np.nanargmin(p)) if np.isfinite(p).any() else 0
    verdicts = [str(v) for v in ds["verdict"].values]
    verdict = "error" if "error" in verdicts else ("fail" if "fail" in verdicts else "pass")
    detail = "; ".join(f"{s}: curve p {float(ds['curve_p'].values[i]):.3g}, k* {float(ds['onset_k'].values[i]):.4g} "
                       f"[{float(ds['onset_k_low'].values[i]):.4g}, {float(ds['onset_k_high'].values[i]):.4g}] vs scale "
                       f"{float(ds['expansion_scale'].values[i]):.4g} ({ds['scale_predicts'].values[i]})"
                       for i, s in enumerate(ds["setting"].values))
    return {"estimate": float(ds["curve_max_t"].values[worst]), "estimate_mcse": float("nan"), "verdict": verdict,
            "detail": f"{detail}; scale predicts k* within [1, 16] x scale: {answer(ds['scale_predicts'].values)}"}


CURVE_CHECK = Check(
    claim="C1",
    statistic=lambda ds: (f"Monte Carlo gap curve against the exact curve at every k, {ds.sizes['setting']} settings "
                          f"(expansion scale up to {float(np.nanmax(ds['expansion_scale'].values)):.3g}); max-t, "
                          f"bootstrap reference, alpha {ALPHA:g} each (protocols/onset.md)"),
    evaluate=_curve_check,
    false_fail_rate=lambda ds: 1.0 - (1.0 - ALPHA) ** ds.sizes["setting"],
    pvalues=lambda ds: {f"{s}:curve": (float(ds["curve_p"].values[i]), ALPHA) for i, s in enumerate(ds["setting"].values)},
    protocol=PROTOCOL_PATH,
    label="gap curve against the exact curve: max |t| of the setting with the smallest p",
)


class Onset(Study):
    name = "onset"
    claim = "C1"
    title = "The onset of the 1/k regime where the expansion scale is 10^3-10^4 (pre-registered)"
    cell_dim = "setting"
    default_seed = 20261205
    ademp = {
        "aim": "from which k on c1/k describes gap_k (|k gap_k/c1 - 1| <= 0.1) at expansion scales 1e3-1e4 and on "
               "real data; whether the scale predicts it within a factor 4 (protocols/onset.md)",
        "data": "vMF pi on S^7 at tau 0.02, 0.03; a vMF mixture on S^15 at tau 0.03; digits at tau 0.05",
        "estimand": "the onset k* on the exact curve (half-octave grid to 2^24), its interval; the MC curve",
        "methods": "simkit.exact.curve / simkit.diagnose exact curves; simkit.stats.onset; GapEstimator blocks and the "
                   "finite-set estimator; max-t curve test with a bootstrap reference",
        "performance": "k* with 95% interval, k*/scale, inside/outside [scale, 16 scale]; curve p per setting",
    }
    schema = SCHEMA
    checks = (CURVE_CHECK,)
    params = {
        "settings": Param("settings", str, ",".join(SETTINGS), "comma-separated settings", choices=tuple(SETTINGS),
                          multi=True, quick="digits-pixels-t0.05"),
        "k_max_cap": Param("k_max_cap", int, 1 << 18, "largest Monte Carlo k_max (each setting's own k_max below it)",
                           low=16, high=1 << 22, power_of_two=True, quick=1 << 10),
        "n_blocks": Param("n_blocks", int, 64, "replicate blocks per setting", low=8, high=100000, quick=16),
        "block_anchors": Param("block_anchors", int, 256, "anchors per block", low=8, high=1 << 16, quick=64),
        "pilot_blocks": Param("pilot_blocks", int, 4, "pilot blocks of the control-variate coefficients", low=1,
                              high=64, quick=1),
        "n_half_octaves": Param("n_half_octaves", int, 48, "exact grid k = round(2^(j/2)), j <= this", low=8, high=60,
                                quick=32),
        "n_mc": Param("n_mc", int, 512, "anchors of the mixture's exact curve (exact inner integrals)", low=16,
                      high=1 << 16, quick=64),
        "n_cv": Param("n_cv", int, 1 << 18, "anchors of the mixture's control variate, c1, c2 and scale", low=1024,
                      high=1 << 24, quick=1 << 14),
        "prep_parts": Param("prep_parts", int, 8, "tasks sharing the mixture's Monte Carlo preparation", low=1, high=64),
        "n_draws": Param("n_draws", int, 2000, "draws of the onset interval", low=100, high=100000, quick=200),
    }

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            fam, d, kp, km, tau, lk = SETTINGS[name]
            out.append({"setting": name, "pi": fam, "dim": d, "kappa_pi": kp, "kappa_m": km, "tau": tau,
                        "k_max": int(min(1 << lk, cfg["k_max_cap"]))})
        return out

    def _grid(self, cfg) -> np.ndarray:
        return k_grid(max(c["k_max"] for c in self.cells(cfg)))

    def _estimator(self, cell) -> GapEstimator:
        return GapEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cell["k_max"])

    def block_dims(self, cfg):
        return {"gap": ("k",)}, {"k": self._grid(cfg)}

    def _coef_shape(self, cfg):
        return (self._grid(cfg).size, 4)

    def _pilot(self, cell, cfg, rng) -> np.ndarray:
        coef = np.full(self._coef_shape(cfg), np.nan)
        if cell["pi"] != "digits":
            c = self._estimator(cell).calibrate(cfg["block_anchors"], rng, n_blocks=cfg["pilot_blocks"])
            coef[: c.shape[0]] = c
        return coef

    def prepare(self, cell, cfg, rng):
        ks = tuple(int(k) for k in exact_grid(cfg["n_half_octaves"]))
        out = dict(_exact_quadrature(cell["pi"], cell["dim"], cell["kappa_pi"], cell["kappa_m"], cell["tau"], ks))
        out["coef"] = self._pilot(cell, cfg, rng)
        return out

    def prepare_parts(self, cell, cfg):
        if cell["pi"] == "digits":
            return 0
        est = self._estimator(cell)
        return int(cfg["prep_parts"]) if needs_monte_carlo(est.pi, est.kernel) else 0

    def prepare_part(self, cell, cfg, part, rng):
        est = self._estimator(cell)
        out = {"coef": self._pilot(cell, cfg, rng)} if part == 0 else {}
        out.update(anchor_moments(est.pi, est.kernel, est.tau, exact_grid(cfg["n_half_octaves"]), part,
                                  int(cfg["prep_parts"]), rng=rng, n_mc=cfg["n_mc"], n_cv=cfg["n_cv"]))
        return {n: np.asarray(v, dtype=float) for n, v in out.items()}

    def combine_parts(self, cell, cfg, parts):
        est = self._estimator(cell)
        got = constants_from_moments(est.pi, est.kernel, est.tau, exact_grid(cfg["n_half_octaves"]),
                                     pool_moments([{k: v for k, v in p.items() if k != "coef"} for p in parts]))
        out = {"coef": parts[0]["coef"], "rho": max(got["rho"], got["mbar"]), "gap_exact": got["curve"].gap,
               "gap_exact_cov": got["curve"].gap_cov}
        for n in ("c1", "c2"):
            out[n], out[f"{n}_mcse"] = got[n].value, got[n].mcse
        return {n: np.asarray(v, dtype=float) for n, v in out.items()}

    def generate(self, cell, cfg, prep, rng):
        grid = self._grid(cfg)
        out = np.full(grid.size, np.nan)
        n_k = int(np.log2(cell["k_max"])) + 1
        if cell["pi"] == "digits":
            out[:n_k] = self._digits_block(cell["tau"], grid[:n_k], cfg["block_anchors"], rng)
        else:
            out[:n_k] = self._estimator(cell).block(cfg["block_anchors"], rng, prep["coef"][:n_k])["gap_cv"]
        return {"gap": out}

    @staticmethod
    def _digits_block(tau, grid, n, rng) -> np.ndarray:
        """n anchors uniform over the rows, one same-label positive each (the anchor included), grid[-1]
        i.i.d. uniform negatives each: the mean of the control-variate gap term over the anchors."""
        unit, labels = _digits()
        _, log_z = scores_and_log_z(unit, tau)
        a = rng.integers(0, unit.shape[0], n)
        idx, mask = class_members(labels)
        cnt = mask.sum(axis=1)
        pos = idx[a, (rng.random(n) * cnt[a]).astype(np.int64)]
        s = unit[a] @ unit.T / tau
        w_pos = np.exp(s[np.arange(n), pos] - log_z[a])[:, None]
        neg = rng.integers(0, unit.shape[0], size=(n, 1, int(grid[-1])))
        _, cv = gap_terms(w_pos, ratio_block(s, log_z[a], neg, grid), grid)
        return cv.mean(axis=(0, 1))

    def summarise(self, raw, cfg) -> dict:
        k, ke = raw["k"].values.astype(float), exact_grid(cfg["n_half_octaves"]).astype(float)
        n = raw.sizes["setting"]
        blocks = raw["raw_gap"].values
        gap, se = mean_mcse(blocks, axis=1)
        c1, c2 = raw["prep_c1"].values, raw["prep_c2"].values
        c1_se, c2_se = raw["prep_c1_mcse"].values, raw["prep_c2_mcse"].values
        ge, cov = raw["prep_gap_exact"].values, raw["prep_gap_exact_cov"].values
        rho = raw["prep_rho"].values
        at_k = np.searchsorted(ke, k)
        out = {"gap": gap, "gap_mcse": se, "k_gap_ratio": k * gap / c1[:, None], "k_gap_ratio_mcse": k * se / np.abs(c1)[:, None],
               "k_exact": ke.astype(np.int64), "gap_exact": ge, "gap_exact_mcse": np.sqrt(np.clip(np.diagonal(cov, axis1=1, axis2=2), 0.0, None)),
               "gap_exact_k": ge[:, at_k], "ratio_exact_k": k * ge[:, at_k] / c1[:, None],
               "c1": c1, "c1_mcse": c1_se, "c2": c2, "c2_mcse": c2_se, "expansion_scale": rho,
               "crossover": np.abs(c2 / c1), "predicted_low": PREDICTED[0] * rho, "predicted_high": PREDICTED[1] * rho}
        out["ratio_exact"] = np.stack([onset_ratio(ke, ge[i], c1[i]) for i in range(n)])
        out["ratio2_exact"] = np.stack([onset_ratio(ke, ge[i], c1[i], c2[i]) for i in range(n)])
        names = ("onset_k", "onset_k_low", "onset_k_high", "onset_k_second_order", "onset_k_second_order_low",
                 "onset_k_second_order_high", "onset_over_scale", "onset_within_rule", "curve_max_t", "curve_p",
                 "k_max", "n_blocks_done")
        out.update({name: np.full(n, np.nan) for name in names})
        out["scale_predicts"], out["verdict"], out["verdict_reason"] = [""] * n, [""] * n, [""] * n
        for i in range(n):
            setting = str(raw["setting"].values[i])
            gen = np.random.default_rng([int(cfg["seed"]), 0x0A5E7, *setting.encode()])
            for suffix, second in (("", None), ("_second_order", c2[i])):
                out[f"onset_k{suffix}"][i] = onset_k(ke, onset_ratio(ke, ge[i], c1[i], second), TOL)
                lo, hi = onset_interval(ke, ge[i], c1[i], c2=second, gap_cov=cov[i], c1_mcse=c1_se[i],
                                        c2_mcse=c2_se[i] if second is not None else 0.0, tol=TOL,
                                        n_draws=cfg["n_draws"], rng=gen)
                out[f"onset_k{suffix}_low"][i], out[f"onset_k{suffix}_high"][i] = lo, hi
            out["onset_over_scale"][i] = out["onset_k"][i] / rho[i]
            out["scale_predicts"][i] = interval_position(out["onset_k_low"][i], out["onset_k_high"][i],
                                                         PREDICTED[0] * rho[i], PREDICTED[1] * rho[i])
            out["onset_within_rule"][i] = float(out["onset_k_high"][i] <= PREDICTED[1] * rho[i])
            b = blocks[i][:, np.isfinite(blocks[i]).all(axis=0)]
            b = b[np.isfinite(b).all(axis=1)]
            g = b.shape[1]
            out["k_max"][i], out["n_blocks_done"][i] = k[g - 1], b.shape[0]
            t = curve_test(b, ge[i, at_k[:g]], exact_cov=cov[i][np.ix_(at_k[:g], at_k[:g])], reference="max-t",
                           rng=truth_rng(cfg["seed"], setting))
            out["curve_max_t"][i], out["curve_p"][i] = t.statistic, t.p_value
            failed = bool(str(raw["cell_error"].values[i]))
            out["verdict"][i] = "error" if failed else ("pass" if t.p_value >= ALPHA else "fail")
            if out["verdict"][i] == "fail":
                out["verdict_reason"][i] = f"Monte Carlo curve differs from the exact curve (p {t.p_value:.2g} < {ALPHA:g})"
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "onset_tol": TOL, "predicted_factor_low": PREDICTED[0],
                "predicted_factor_high": PREDICTED[1], **protocol_attrs(PROTOCOL_PATH),
                "analysis": "quick (CI) design: not the confirmatory run" if cfg.get("quick") else
                "confirmatory (protocols/onset.md)"}

    def summary_text(self, ds) -> str:
        lines = [f"{'setting':<22}{'scale':>10}{'k*':>10}{'95% interval':>24}{'k*/scale':>10}{'k*(2nd)':>10}"
                 f"{'curve p':>9}  predicts"]
        for i, s in enumerate(ds["setting"].values):
            g = lambda n: float(ds[n].values[i])  # noqa: E731
            lines.append(f"{s:<22}{g('expansion_scale'):>10.4g}{g('onset_k'):>10.4g}   [{g('onset_k_low'):>9.4g}, "
                         f"{g('onset_k_high'):>9.4g}]{g('onset_over_scale'):>10.3g}{g('onset_k_second_order'):>10.4g}"
                         f"{g('curve_p'):>9.3g}  {ds['scale_predicts'].values[i]}")
        lines.append(f"does the expansion scale predict k* within [1, 16] x scale? {answer(ds['scale_predicts'].values)}")
        return "\n".join(lines)


STUDY = Onset()
