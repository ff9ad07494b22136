"""The trained embedding's bias: the InfoNCE minimiser θ_k against the cross-entropy minimiser θ*.

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        docs/theory.md §17: over a score class, θ_k = argmin R_k moves from θ* = argmin CE by
           −H⁻¹g/k and CE(θ_k) − CE(θ*) = ½gᵀH⁻¹g/k² + O(k⁻³) (g = ∇c1(θ*), H = ∇²CE(θ*)); when the
           class contains the log density ratio (well specified) θ_k = θ* at every k. Then: at what n
           does the sampling error of the empirical minimiser (order 1/n in excess CE) exceed this bias?
Data       π on the atoms of a Fibonacci lattice on S², positives from a kernel M on them, linear
           classes s_θ = Σ θ_p F_p(x·y) (:data:`CLASSES`): two well specified, four misspecified.
Estimand   Exactly: θ*, θ_k, CE(θ_k) − CE(θ*) on k = 2, 4, ..., k_max, its log-log slope, the limits
           of k²·excess and k(θ_k − θ*). By Monte Carlo: CE(θ̂_{n,k}) − CE(θ*) of the empirical
           minimiser over n tuples, per k and n, and θ̂'s mean.
Methods    simkit.exact.minimiser (exact R_k and ∇R_k by the Frullani identity, roots to 1e-13);
           simkit.stats.exact_rate (local slopes, Richardson limits); simkit.estimators.minimiser
           (tuples from the runner's rng, Newton on the empirical risk); blocks independent.
Performance  Deterministic rules where the quantity is exact; a Hotelling test (Bonferroni, α = 1e-3)
           of the empirical minimiser's mean against θ_k; every Monte Carlo estimate with its MCSE.

Pre-registered in protocols/minimiser.md. Run it: ``simkit run minimiser``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from simkit.claims.protocol import protocol_attrs
from simkit.estimators.minimiser import empirical_minimiser, sample_tuples
from simkit.exact import minimiser as mn
from simkit.runner import Check, Param, Study, Var
from simkit.stats.analysis import combine_verdicts, fit_rate, mean_mcse
from simkit.stats.exact_rate import loglog_slope, richardson_limit
from simkit.stats.truth_tests import curve_test

PROTOCOL_PATH = "protocols/minimiser.md"
#: total false-failure rate of the empirical check (Bonferroni over its (class, k) tests)
ALPHA = 1e-3
#: deterministic tolerances (protocols/minimiser.md §3): well-specified shift, slope, relative constants
WELL_TOL, SLOPE_TOL, SLOPE_BAND, CONST_RTOL = 1e-10, 0.01, 0.1, 1e-3

#: class -> (π, kernel, features, θ0 when well specified, description); κ = 4 throughout
CLASSES = {
    "vmf-uniform": ("uniform", "vmf", ("xy",), (4.0,), "uniform π, M ∝ e^{4x·y}, s = θ x·y (well specified)"),
    "vmf-tilted-quadratic": ("tilted", "vmf-tilted", ("xy", "xy2"), (4.0, 0.0),
                             "π ∝ e^{1.5 z}, M ∝ π(y) e^{4x·y}, s = θ1 x·y + θ2 (x·y)² (well specified)"),
    "brownian": ("uniform", "brownian", ("xy",), None, "uniform π, M ∝ exp(−angle²/0.3), s = θ x·y"),
    "vmf-pi-tilted": ("tilted", "vmf", ("xy",), None, "π ∝ e^{1.5 z}, M ∝ e^{4x·y}, s = θ x·y (m = M/π not in class)"),
    "brownian-quadratic": ("uniform", "brownian", ("xy", "xy2"), None,
                           "uniform π, M ∝ exp(−angle²/0.3), s = θ1 x·y + θ2 (x·y)²"),
    "axial-quadratic": ("uniform", "axial", ("xy", "xy2"), None,
                        "uniform π, M ∝ e^{4|x·y|}, s = θ1 x·y + θ2 (x·y)²"),
}


def fibonacci_sphere(n: int) -> np.ndarray:
    """n points of the Fibonacci lattice on S² (nearly uniform, deterministic)."""
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    r, ph = np.sqrt(1.0 - z * z), math.pi * (1.0 + math.sqrt(5.0)) * i
    return np.stack([r * np.cos(ph), r * np.sin(ph), z], axis=1)


def build_class(name: str, n_atoms: int) -> tuple[mn.ScoreClass, np.ndarray | None]:
    """The finite problem of class ``name`` on ``n_atoms`` lattice points, and θ0 (None if misspecified)."""
    pi_kind, kernel, feats, theta0, _ = CLASSES[name]
    x = fibonacci_sphere(n_atoms)
    dot = np.clip(x @ x.T, -1.0, 1.0)
    w = np.full(n_atoms, 1.0 / n_atoms) if pi_kind == "uniform" else np.exp(1.5 * x[:, 2])
    w = w / w.sum()
    m = {"vmf": np.exp(4.0 * dot), "vmf-tilted": w[None, :] * np.exp(4.0 * dot),
         "brownian": np.exp(-np.arccos(dot) ** 2 / 0.3), "axial": np.exp(4.0 * np.abs(dot))}[kernel]
    f = np.stack([{"xy": dot, "xy2": dot**2}[p] for p in feats])
    return mn.ScoreClass(f, w, m / m.sum(axis=1, keepdims=True)), None if theta0 is None else np.array(theta0)


@functools.lru_cache(maxsize=64)
def _exact(name: str, n_atoms: int, k_max: int) -> mn.MinimiserResult:
    """The exact part of a class (no randomness, so computed once per process: calibration's seeds share it)."""
    return mn.minimise(build_class(name, n_atoms)[0], 2.0 ** np.arange(1, int(round(math.log2(k_max))) + 1))


S, K, P = ("setting",), ("setting", "k"), ("setting", "param")
E, EN = ("setting", "k_emp"), ("setting", "k_emp", "n")
NATS = "in nats"
MCSE = "sd over blocks / sqrt(number of converged blocks)"


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


_PREP = {"theta_star": 1, "ce_star": 0, "theta_k": 2, "grad_norm": 1, "excess": 1, "g": 1, "hessian": 2,
         "shift_const": 1, "excess_const": 0, "theta0": 1}
SCHEMA = {
    **{f"prep_{n}": _v(("setting", *[f"{n}_dim{i}" for i in range(d)]), f"per-class exact {n}",
                       "simkit.exact.minimiser.minimise (deterministic; padded with NaN to the largest class)")
       for n, d in _PREP.items()},
    "raw_emp_excess": _v(("setting", "block", "k_emp", "n"), "per-block CE(θ̂_{n,k}) − CE(θ*), in nats",
                         "empirical minimiser of one block's n tuples; NaN where it did not converge"),
    "raw_emp_theta": _v(("setting", "block", "k_emp", "n", "param"), "per-block empirical minimiser θ̂_{n,k}",
                        "simkit.estimators.minimiser.empirical_minimiser; NaN padding beyond the class's parameters"),
    "setting": _v(S, "score class", "name in studies.minimiser.CLASSES"),
    "description": _v(S, "score class in words", "π, positive kernel M and features"),
    "n_params": _v(S, "number of parameters P", "length of θ"),
    "well_specified": _v(S, "class contains the log density ratio", "1 (θ_k = θ0 at every k) or 0"),
    "k": _v(("k",), "number of negatives k (exact part)", "grid 2, 4, ..., k_max"),
    "k_emp": _v(("k_emp",), "number of negatives k (empirical part)", "a subset of the exact grid"),
    "n": _v(("n",), "number of training tuples n", "empirical risk over n i.i.d. tuples"),
    "param": _v(("param",), "parameter index p", "0-based index into θ"),
    "theta_star": _v(P, "θ* = argmin CE", "damped Newton on the closed-form CE"),
    "theta0": _v(P, "θ0 of the well-specified class", "log density ratio in the class; NaN if misspecified"),
    "ce_star": _v(S, "min CE = CE(θ*), in nats", "closed form"),
    "theta_k": _v(("setting", "k", "param"), "θ_k = argmin R_k", "root of the exact gradient (MINPACK, xtol 1e-13)"),
    "grad_norm": _v(K, "max |∂R_k(θ_k)|", "size of the exact gradient at the returned root"),
    "excess": _v(K, "excess CE(θ_k) − CE(θ*), in nats", "simkit.exact.minimiser.excess_cross_entropy (no cancellation)"),
    "k_excess": _v(K, "k · excess, in nats", "constant for an O(1/k) excess, → 0 for O(1/k²)"),
    "k2_excess": _v(K, "k² · excess, in nats", "→ ½gᵀH⁻¹g for an O(1/k²) excess"),
    "k_shift": _v(("setting", "k", "param"), "k (θ_k − θ*)", "→ −H⁻¹g"),
    "g": _v(P, "g = ∇c1(θ*)", "closed form (docs/theory.md §17)"),
    "hessian": _v(("setting", "param", "param_b"), "H = ∇²CE(θ*)", "closed form"),
    "param_b": _v(("param_b",), "parameter index (second)", "column of H"),
    "shift_const": _v(P, "−H⁻¹g", "predicted limit of k(θ_k − θ*)"),
    "excess_const_exact": _v(S, "½gᵀH⁻¹g, in nats", "predicted limit of k² · excess"),
    "excess_const_limit": _v(S, "limit of k² · excess, in nats", "Richardson step on the two largest k"),
    "excess_const_rel_err": _v(S, "relative error of excess_const_limit", "|limit − exact| / exact"),
    "shift_limit": _v(P, "limit of k(θ_k − θ*)", "Richardson step on the two largest k"),
    "shift_rel_err": _v(S, "relative error of shift_limit", "max_p |limit − (−H⁻¹g)| / max_p |H⁻¹g|"),
    "excess_slope": _v(S, "log-log slope of excess against k", "least squares over k >= k_fit_min; NaN where well "
                       "specified (excess 0)"),
    "excess_slope_low": _v(S, "interval for excess_slope, lower", "smallest local slope over k >= k_fit_min"),
    "excess_slope_high": _v(S, "interval for excess_slope, upper", "largest local slope over k >= k_fit_min"),
    "excess_slope_limit": _v(S, "limit of the local slope", "Richardson step on the last two local slopes; −2 "
                             "for O(1/k²), −1 for O(1/k)"),
    "well_max_dev": _v(S, "max over k of max_p |θ_k − θ0|", "NaN where misspecified"),
    "exact_verdict": _v(S, "verdict of the deterministic rules", "pass or fail (protocols/minimiser.md §3)"),
    "exact_reason": _v(S, "why the deterministic rules failed", "empty when they passed"),
    "emp_bias": _v(E, "exact k-bias CE(θ_k) − CE(θ*) at k_emp, in nats", "from excess"),
    "emp_excess": _v(EN, "E CE(θ̂_{n,k}) − CE(θ*), in nats", "mean over converged blocks"),
    "emp_excess_mcse": _v(EN, "MCSE of emp_excess, in nats", MCSE),
    "emp_stat": _v(EN, "statistical excess emp_excess − emp_bias, in nats", "order 1/n"),
    "emp_n_stat": _v(EN, "n · emp_stat, in nats", "→ ½ tr(H Cov θ̂)·n as n grows"),
    "emp_n_stat_mcse": _v(EN, "MCSE of emp_n_stat, in nats", "n · emp_excess_mcse"),
    "emp_converged": _v(EN, "blocks whose empirical minimiser converged", "count"),
    "emp_theta": _v(("setting", "k_emp", "n", "param"), "mean of θ̂_{n,k}", "over converged blocks"),
    "emp_theta_mcse": _v(("setting", "k_emp", "n", "param"), "MCSE of emp_theta", MCSE),
    "emp_n_cross": _v(E, "crossover n: sampling excess = k-bias", "emp_n_stat / emp_bias at the largest n; NaN where "
                      "well specified"),
    "emp_n_cross_mcse": _v(E, "MCSE of emp_n_cross", "delta method"),
    "emp_n_slope": _v(E, "log-log slope of emp_stat against n", "WLS over n >= n_fit_min (simkit.stats.fit_rate, no 1/n "
                      "term); descriptive"),
    "emp_n_slope_se": _v(E, "jackknife SE of emp_n_slope", "delete-one-block"),
    "emp_theta_rich": _v(("setting", "k_emp", "param"), "mean of the n-extrapolated minimiser θ̃",
                         "per block θ̃ = (n2 θ̂_{n2} − n1 θ̂_{n1})/(n2 − n1) on the two largest n: θ̂'s O(1/n) "
                         "bias removed"),
    "emp_theta_rich_mcse": _v(("setting", "k_emp", "param"), "MCSE of emp_theta_rich", MCSE),
    "emp_p": _v(E, "p-value: E θ̃ equals θ_k", "Hotelling T² of the blocks' θ̃, F reference "
                "(simkit.stats.truth_tests.curve_test)"),
    "emp_p_star": _v(E, "p-value: E θ̃ equals θ*", "as emp_p; a diagnostic of power (rejects where the k-shift is "
                     "resolved)"),
    "emp_verdict": _v(S, "verdict of the empirical check", "fail when some emp_p < alpha / number of tests"),
    "verdict": _v(S, "verdict of the class", "pass when exact_verdict and emp_verdict pass"),
    "verdict_reason": _v(S, "why the class failed", "empty when it passed"),
}


def _rows(ds, var):
    return [str(v) for v in ds[var].values]


def _names(ds):
    """Class names (the written dataset keeps them in ``setting_label``)."""
    return ds["setting_label"].values if "setting_label" in ds.variables else ds["setting"].values


def _exact_check(kind: str):
    def evaluate(ds):
        well = ds["well_specified"].values.astype(bool)
        sel = well if kind == "well" else ~well
        names, v = _names(ds), _rows(ds, "exact_verdict")
        if kind == "well":
            est = float(np.nanmax(ds["well_max_dev"].values[sel])) if sel.any() else math.nan
            det = "; ".join(f"{names[i]}: max |θ_k − θ0| {ds['well_max_dev'].values[i]:.2g} -> {v[i]}"
                            for i in np.nonzero(sel)[0])
        else:
            err = ds["excess_const_rel_err"].values[sel]
            est = float(np.nanmax(err)) if sel.any() else math.nan
            det = "; ".join(
                f"{names[i]}: slope {ds['excess_slope'].values[i]:.4f} [{ds['excess_slope_low'].values[i]:.4f}, "
                f"{ds['excess_slope_high'].values[i]:.4f}] → {ds['excess_slope_limit'].values[i]:.4f}; k²·excess → "
                f"{ds['excess_const_limit'].values[i]:.6g} vs ½gᵀH⁻¹g {ds['excess_const_exact'].values[i]:.6g}; shift "
                f"rel. err {ds['shift_rel_err'].values[i]:.2g} -> {v[i]}" for i in np.nonzero(sel)[0])
        return {"estimate": est, "estimate_mcse": 0.0,
                "verdict": combine_verdicts([v[i] for i in np.nonzero(sel)[0]]) if sel.any() else "error",
                "detail": det + (f" ({'; '.join(r for r in _rows(ds, 'exact_reason') if r)})"
                                 if any(_rows(ds, "exact_reason")) else "")}
    return evaluate


def _n_tests(ds) -> int:
    return int(np.isfinite(ds["emp_p"].values).sum()) or 1


def _emp_check(ds):
    p = ds["emp_p"].values
    est = float(np.nanmin(p)) if np.isfinite(p).any() else math.nan
    return {"estimate": est, "estimate_mcse": 0.0, "verdict": combine_verdicts(_rows(ds, "emp_verdict")),
            "detail": f"smallest p {est:.3g} of {_n_tests(ds)} tests against α/m = {ALPHA / _n_tests(ds):.2g}; p against "
                      f"θ* (power), misspecified classes: " + ", ".join(
                          f"{_names(ds)[i]} {' '.join(format(p, '.2g') for p in ds['emp_p_star'].values[i])}"
                          for i in np.nonzero(~ds["well_specified"].values.astype(bool))[0])}


def _emp_pvalues(ds):
    names, m = _names(ds), _n_tests(ds)
    return {f"{names[i]}:k={int(k)}": (float(ds["emp_p"].values[i, j]), ALPHA / m)
            for i in range(ds.sizes["setting"]) for j, k in enumerate(ds["k_emp"].values)
            if np.isfinite(ds["emp_p"].values[i, j])}


CHECKS = (
    Check("M1", "well specified: θ_k = θ0 at every k (max |θ_k − θ0| <= 1e-10; exact, so deterministic)",
          _exact_check("well"), None, protocol=PROTOCOL_PATH, label="no shift when well specified"),
    Check("M1", "misspecified: excess = ½gᵀH⁻¹g/k² (local slope → −2 ± 0.01, k²·excess and k(θ_k − θ*) to their "
          "predicted limits within 1e-3 relative; exact, so deterministic)", _exact_check("mis"), None,
          protocol=PROTOCOL_PATH, label="O(1/k²) excess with its constant"),
    Check("M1", lambda ds: f"empirical minimiser centred at θ_k (Hotelling per class and k of θ̃ extrapolated from n = "
          f"{int(ds['n'].values[-2])}, {int(ds['n'].values[-1])}; Bonferroni over {_n_tests(ds)} tests)", _emp_check, ALPHA,
          pvalues=_emp_pvalues, protocol=PROTOCOL_PATH, label="empirical minimiser estimates θ_k"),
)


class Minimiser(Study):
    name = "minimiser"
    claim = "M1"
    title = "The trained embedding's bias: the InfoNCE minimiser's excess cross-entropy is O(1/k²)"
    cell_dim = "setting"
    schema = SCHEMA
    checks = CHECKS
    ademp = {
        "aim": "docs/theory.md §17: θ_k − θ* = −H⁻¹g/k, CE(θ_k) − CE(θ*) = ½gᵀH⁻¹g/k², no shift when well specified; "
               "where the empirical minimiser's 1/n sampling error overtakes the k-bias",
        "data": "finite π on a Fibonacci lattice on S², kernels vMF, Brownian-like and axial; linear classes in x·y "
                "and (x·y)²; two well-specified and four misspecified classes",
        "estimand": "θ_k, CE(θ_k) − CE(θ*) (exact) on k = 2..k_max; E CE(θ̂_{n,k}) − CE(θ*) and E θ̂_{n,k}",
        "methods": "exact R_k and gradient (Frullani identity), roots to 1e-13; local slopes and Richardson limits; "
                   "Newton on the empirical risk of n tuples per block",
        "performance": "deterministic tolerances on exact quantities; Hotelling test of E θ̂ = θ_k (α = 1e-3 "
                       "Bonferroni); MCSE of every Monte Carlo estimate",
    }
    params = {
        "classes": Param("classes", str, ",".join(CLASSES), "comma-separated score classes", choices=tuple(CLASSES),
                         multi=True, quick="vmf-uniform,vmf-pi-tilted,axial-quadratic"),
        "n_atoms": Param("n_atoms", int, 24, "atoms of π (Fibonacci lattice on S²)", low=4, high=400, quick=12),
        "k_max": Param("k_max", int, 4096, "largest k of the exact grid 2, 4, ..., k_max", low=16, high=1 << 16,
                       power_of_two=True, quick=1024),
        "k_fit_min": Param("k_fit_min", int, 256, "smallest k of the slope fit and Richardson limits", low=2),
        "k_emp": Param("k_emp", int, "2,8,32", "k of the empirical part (powers of two <= k_max)", multi=True,
                       min_items=1, low=2, power_of_two=True, items_doc="powers of two >= 2", quick="2,8"),
        "ns": Param("ns", int, "64,256,1024,4096,16384", "numbers of tuples n of the empirical part", multi=True,
                    min_items=2, low=16, high=1 << 22, items_doc="integers >= 16", quick="64,256,1024"),
        "n_fit_min": Param("n_fit_min", int, 256, "smallest n of the descriptive slope in n", low=16),
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per class", low=4, high=100000, quick=16),
    }

    def check_config(self, cfg):
        bad = [k for k in self.params["k_emp"].values(cfg["k_emp"]) if k > cfg["k_max"]]
        if bad:
            raise ValueError(f"'k_emp' must be <= k_max = {cfg['k_max']}, got {bad[0]}")
        if cfg["k_fit_min"] * 4 > cfg["k_max"]:
            raise ValueError(f"'k_fit_min' must be <= k_max / 4 = {cfg['k_max'] // 4}, got {cfg['k_fit_min']}")

    def _p_max(self, cfg) -> int:
        return max(len(CLASSES[c][2]) for c in cfg["classes"].split(","))

    def cells(self, cfg):
        return [{"setting": c, "description": CLASSES[c][4], "n_params": len(CLASSES[c][2]),
                 "well_specified": int(CLASSES[c][3] is not None)} for c in cfg["classes"].split(",")]

    def _ks(self, cfg):
        return 2.0 ** np.arange(1, int(round(math.log2(cfg["k_max"]))) + 1)

    def block_dims(self, cfg):
        coords = {"k_emp": np.array(self.params["k_emp"].values(cfg["k_emp"]), dtype=float),
                  "n": np.array(self.params["ns"].values(cfg["ns"]), dtype=float),
                  "param": np.arange(self._p_max(cfg)), "param_b": np.arange(self._p_max(cfg)), "k": self._ks(cfg)}
        return {"emp_excess": ("k_emp", "n"), "emp_theta": ("k_emp", "n", "param")}, coords

    def prepare(self, cell, cfg, rng):
        c, theta0 = build_class(cell["setting"], cfg["n_atoms"])
        r = _exact(cell["setting"], cfg["n_atoms"], cfg["k_max"])
        pm, p = self._p_max(cfg), c.n_params

        def pad(a, axes):
            a = np.asarray(a, dtype=float)
            width = [(0, pm - p if i in axes else 0) for i in range(a.ndim)]
            return np.pad(a, width, constant_values=np.nan)
        return {"theta_star": pad(r.theta_star, (0,)), "ce_star": np.array(r.ce_star),
                "theta_k": pad(r.theta_k, (1,)), "grad_norm": r.grad_norm, "excess": r.excess, "g": pad(r.g, (0,)),
                "hessian": pad(r.hessian, (0, 1)), "shift_const": pad(r.shift_const, (0,)),
                "excess_const": np.array(r.excess_const),
                "theta0": pad(np.full(p, np.nan) if theta0 is None else theta0, (0,))}

    def generate(self, cell, cfg, prep, rng):
        c, _ = build_class(cell["setting"], cfg["n_atoms"])
        p, ks = c.n_params, self._ks(cfg)
        k_emp, ns = self.params["k_emp"].values(cfg["k_emp"]), self.params["ns"].values(cfg["ns"])
        excess = np.full((len(k_emp), len(ns)), np.nan)
        theta = np.full((len(k_emp), len(ns), self._p_max(cfg)), np.nan)
        for i, k in enumerate(k_emp):
            start = prep["theta_k"][int(np.nonzero(ks == k)[0][0]), :p]
            for j, n in enumerate(ns):
                th, ok = empirical_minimiser(c, sample_tuples(c, n, k, rng), start)
                if ok:
                    theta[i, j, :p] = th
                    excess[i, j] = mn.excess_cross_entropy(c, th, prep["theta_star"][:p])
        return {"emp_excess": excess, "emp_theta": theta}

    def summarise(self, raw, cfg) -> dict:
        ks = self._ks(cfg)
        k_emp, ns = raw["k_emp"].values, raw["n"].values
        pre = {n: raw[f"prep_{n}"].values for n in _PREP}
        n_set, pm = raw.sizes["setting"], self._p_max(cfg)
        out = {n: pre[n] for n in ("theta_star", "theta0", "ce_star", "theta_k", "grad_norm", "excess", "g",
                                   "hessian", "shift_const")}
        out["excess_const_exact"] = pre["excess_const"]
        out["k_excess"], out["k2_excess"] = ks * pre["excess"], ks**2 * pre["excess"]
        out["k_shift"] = ks[None, :, None] * (pre["theta_k"] - pre["theta_star"][:, None, :])
        sel = ks >= cfg["k_fit_min"]
        out["excess_const_limit"] = richardson_limit(ks[sel], out["k2_excess"][:, sel])
        out["shift_limit"] = richardson_limit(ks[sel], np.moveaxis(out["k_shift"][:, sel], 1, 2))
        well = raw["well_specified"].values.astype(bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["excess_const_rel_err"] = np.abs(out["excess_const_limit"] / pre["excess_const"] - 1.0)
            out["shift_rel_err"] = (np.nanmax(np.abs(out["shift_limit"] - pre["shift_const"]), axis=1)
                                    / np.nanmax(np.abs(pre["shift_const"]), axis=1))
        fits = [loglog_slope(ks, pre["excess"][i], cfg["k_fit_min"]) if not well[i] else {} for i in range(n_set)]
        for name, key in (("excess_slope", "slope"), ("excess_slope_low", "low"), ("excess_slope_high", "high"),
                          ("excess_slope_limit", "limit")):
            out[name] = np.array([f.get(key, math.nan) for f in fits])
        for name in ("excess_const_rel_err", "shift_rel_err"):
            out[name] = np.where(well, np.nan, out[name])
        dev = np.abs(pre["theta_k"] - pre["theta0"][:, None, :])
        out["well_max_dev"] = np.array([np.nanmax(dev[i]) if well[i] else np.nan for i in range(n_set)])
        exact = [self._exact_rule(out, pre, i, well[i]) for i in range(n_set)]
        out["exact_verdict"], out["exact_reason"] = [e[0] for e in exact], [e[1] for e in exact]
        # the empirical part
        idx = np.array([int(np.nonzero(ks == k)[0][0]) for k in k_emp])
        bias = pre["excess"][:, idx]
        exc = raw["raw_emp_excess"].values  # (setting, block, k_emp, n)
        out["emp_bias"] = bias
        out["emp_excess"], out["emp_excess_mcse"] = mean_mcse(exc, axis=1)
        out["emp_converged"] = np.sum(np.isfinite(exc), axis=1)
        out["emp_stat"] = out["emp_excess"] - bias[:, :, None]
        out["emp_n_stat"], out["emp_n_stat_mcse"] = ns * out["emp_stat"], ns * out["emp_excess_mcse"]
        out["emp_theta"], out["emp_theta_mcse"] = mean_mcse(raw["raw_emp_theta"].values, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cross = out["emp_n_stat"][:, :, -1] / bias
            out["emp_n_cross"] = np.where(well[:, None], np.nan, cross)
            out["emp_n_cross_mcse"] = np.where(well[:, None], np.nan, out["emp_n_stat_mcse"][:, :, -1] / bias)
        slope, slope_se = np.full(bias.shape, np.nan), np.full(bias.shape, np.nan)
        p_k, p_star = np.full(bias.shape, np.nan), np.full(bias.shape, np.nan)
        rich, rich_se = np.full((*bias.shape, pm), np.nan), np.full((*bias.shape, pm), np.nan)
        for i in range(n_set):
            p = int(raw["n_params"].values[i])
            for j in range(k_emp.size):
                blocks = exc[i, :, j, :] - bias[i, j]
                blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
                if blocks.shape[0] >= 3 and np.sum(ns >= cfg["n_fit_min"]) >= 2 and np.all(blocks.mean(0) > 0):
                    try:
                        fit = fit_rate(ns, blocks, cfg["n_fit_min"], with_inverse=False)
                        slope[i, j], slope_se[i, j] = fit.slope, fit.slope_se
                    except (ValueError, np.linalg.LinAlgError):
                        pass
                # Richardson in n on the two largest n (independent samples): removes θ̂'s O(1/n) bias
                th = richardson_limit(ns[-2:], np.moveaxis(raw["raw_emp_theta"].values[i, :, j, -2:, :p], 1, 2))
                th = th.reshape(-1, p)
                rich[i, j, :p], rich_se[i, j, :p] = mean_mcse(th, axis=0)
                th = th[np.all(np.isfinite(th), axis=1)]
                if th.shape[0] >= p + 2:
                    p_k[i, j] = curve_test(th, pre["theta_k"][i, idx[j], :p]).p_value
                    p_star[i, j] = curve_test(th, pre["theta_star"][i, :p]).p_value
        out["emp_n_slope"], out["emp_n_slope_se"], out["emp_p"], out["emp_p_star"] = slope, slope_se, p_k, p_star
        out["emp_theta_rich"], out["emp_theta_rich_mcse"] = rich, rich_se
        m = max(int(np.isfinite(p_k).sum()), 1)
        emp = []
        for i in range(n_set):
            low = [f"k = {int(k_emp[j])}: p = {p_k[i, j]:.2g}" for j in range(k_emp.size) if p_k[i, j] < ALPHA / m]
            short = [f"k = {int(k_emp[j])}" for j in range(k_emp.size) if not np.isfinite(p_k[i, j])]
            emp.append(("fail", "empirical minimiser not centred at θ_k (" + ", ".join(low) + ")") if low else
                       ("error", "too few converged blocks at the largest n (" + ", ".join(short) + ")") if short else
                       ("pass", ""))
        out["emp_verdict"] = [e[0] for e in emp]
        out["verdict"] = [combine_verdicts([out["exact_verdict"][i], emp[i][0]]) for i in range(n_set)]
        out["verdict_reason"] = ["; ".join(r for r in (out["exact_reason"][i], emp[i][1]) if r) for i in range(n_set)]
        return out

    @staticmethod
    def _exact_rule(out, pre, i, well) -> tuple[str, str]:
        """protocols/minimiser.md §3: the deterministic rules of one class."""
        if well:
            dev = float(out["well_max_dev"][i])
            g = float(np.nanmax(np.abs(pre["g"][i])))
            ok = dev <= WELL_TOL and g <= WELL_TOL
            return ("pass", "") if ok else ("fail", f"θ_k moves: max |θ_k − θ0| = {dev:.2g}, |g| = {g:.2g}")
        why = []
        lim, lo, hi = out["excess_slope_limit"][i], out["excess_slope_low"][i], out["excess_slope_high"][i]
        if not abs(lim + 2.0) <= SLOPE_TOL:
            why.append(f"local slope → {lim:.4f}, not −2 ± {SLOPE_TOL:g}")
        if not (lo >= -2.0 - SLOPE_BAND and hi <= -2.0 + SLOPE_BAND):
            why.append(f"local slopes [{lo:.4f}, {hi:.4f}] leave −2 ± {SLOPE_BAND:g}")
        if not out["excess_const_rel_err"][i] <= CONST_RTOL:
            why.append(f"k²·excess → {out['excess_const_limit'][i]:.6g}, not ½gᵀH⁻¹g = "
                       f"{pre['excess_const'][i]:.6g} (rel. {out['excess_const_rel_err'][i]:.2g})")
        if not out["shift_rel_err"][i] <= CONST_RTOL:
            why.append(f"k(θ_k − θ*) → not −H⁻¹g (rel. {out['shift_rel_err'][i]:.2g})")
        return ("fail", "; ".join(why)) if why else ("pass", "")

    def attrs(self, cfg):
        return {"alpha": ALPHA, "well_tol": WELL_TOL, "slope_tol": SLOPE_TOL, "slope_band": SLOPE_BAND,
                "const_rtol": CONST_RTOL, **protocol_attrs(PROTOCOL_PATH)}

    def summary_text(self, ds) -> str:
        lines = [f"{'class':<22}{'½gᵀH⁻¹g':>12}{'lim k²·excess':>15}{'slope [interval] → limit':>34}"
                 f"{'max|θ_k−θ0|':>13}  verdict"]
        for i, s in enumerate(_names(ds)):
            lines.append(f"{s:<22}{ds['excess_const_exact'].values[i]:>12.5g}{ds['excess_const_limit'].values[i]:>15.5g}"
                         f"  {ds['excess_slope'].values[i]:>8.4f} [{ds['excess_slope_low'].values[i]:.4f}, "
                         f"{ds['excess_slope_high'].values[i]:.4f}] → {ds['excess_slope_limit'].values[i]:.4f}"
                         f"{ds['well_max_dev'].values[i]:>13.2g}  {ds['verdict'].values[i]}")
        lines.append("")
        lines.append(f"{'class':<22}{'k':>5}{'k-bias':>12}" + "".join(f"{'n = ' + str(int(n)):>22}" for n in ds["n"].values)
                     + f"{'crossover n':>20}")
        for i, s in enumerate(_names(ds)):
            for j, k in enumerate(ds["k_emp"].values):
                cells = "".join(f"{ds['emp_excess'].values[i, j, q]:>12.3g} ± {ds['emp_excess_mcse'].values[i, j, q]:<7.2g}"
                                for q in range(ds.sizes["n"]))
                lines.append(f"{s:<22}{int(k):>5}{ds['emp_bias'].values[i, j]:>12.3g}{cells}"
                             f"{ds['emp_n_cross'].values[i, j]:>12.3g} ± {ds['emp_n_cross_mcse'].values[i, j]:<7.2g}")
        return "\n".join(lines)


STUDY = Minimiser()
