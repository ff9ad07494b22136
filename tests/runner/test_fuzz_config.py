"""Malformed configurations and parameter values, generated with hypothesis, against the public API
and the command line.

Every bad input must end in a ``ValueError`` whose one-line message names the argument (the CLI:
exit status 2 and exactly one stderr line naming the parameter, no traceback), never a crash, a
hang, a non-finite accepted value or a file. What counts as bad is decided here, independently of
simkit's own checks: Python's ``float``/``int`` syntax, each parameter's documented bounds, the list
of settings. In-process CLI calls stop at validation, so they are fast; ``run_study`` is replaced by
a function that fails the test should anything get through. A few cases also go through a real
process.

Examples: 250 + 150 + 40 + 40 + 40 + 60 + 160 + 250 = 990 per run (``derandomize``: the same
examples every run, as CI needs; no example database is written).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import simkit
from simkit import (GeodesicRandomWalk, RotatedVMFKernel, Uniform, VMFKernel, VMFMixture, VonMisesFisher,
                    Discrete)
from simkit import runner as engine
from simkit.cli import main
from simkit.runner import Param, get_study, resolve_config, study_names

STUDIES = study_names()

REPO_ROOT = Path(simkit.__file__).resolve().parent.parent
STUDY = get_study("rate_k")
PARAMS = STUDY.params
NUMERIC = sorted(n for n, p in PARAMS.items() if p.kind in (int, float))
INTS = sorted(n for n, p in PARAMS.items() if p.kind is int)
FLOATS = sorted(n for n, p in PARAMS.items() if p.kind is float)
CHOICES = PARAMS["settings"].choices
# tiny values for every parameter not under test, so that nothing could run long
TINY = {"settings": "vmf-d3", "k_max": "16", "n_blocks": "8", "block_anchors": "8", "pilot_blocks": "1"}


def fuzz(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------------------------
# oracles: what is valid, decided without simkit


def _parses(kind, text) -> bool:
    try:
        kind(text)
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _valid_number(name: str, x: int | float) -> bool:
    p = PARAMS[name]
    if isinstance(x, float) and (not math.isfinite(x) or (p.kind is int and not x.is_integer())):
        return False
    if p.kind is int and p.power_of_two and (int(x) < 1 or int(x) & (int(x) - 1)):
        return False
    # (int and float compare exactly in Python, however large the int)
    if p.low is not None and (x <= p.low if p.low_open else x < p.low):
        return False
    return p.high is None or x <= p.high


def _valid_settings(text: str) -> bool:
    items = [t.strip() for t in text.split(",")]
    return all(t in CHOICES for t in items) and len(set(items)) == len(items)


# ----------------------------------------------------------------------------------------------
# strategies of bad values, as the text a user would type

NON_FINITE = ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "1e400", "-1e400", "9" * 400 + ".0",
              "9" * 4400, "-" + "1" * 5000]  # (past int()'s 4300-digit limit; float() makes them inf)
JUNK = ["", " ", "abc", "[1]", "{}", "None", "null", "true", "0x10", "0b1", "1,5", "1 000", "1..5", "e5", "--1",
        "+-1", "1e", "inf5", "1/2", "½", "∞", "٣x", "💥", "\x00", "1\x00", "'1'", "\"2\"", "1;2", "$HOME",
        "Ⅻ", "١٢٣٤٥٦٧٨٩٠" + "x"]


def _not_a_number(text: str) -> bool:
    return not _parses(float, text) and not _parses(int, text)


def junk_text(surrogates: bool = True) -> st.SearchStrategy[str]:
    alphabet = st.characters() if surrogates else st.characters(blacklist_categories=("Cs",))
    return st.one_of(
        st.sampled_from(JUNK),
        st.text(alphabet, max_size=40),
        st.text(alphabet, min_size=1000, max_size=3000),  # very long
    ).filter(_not_a_number)


def bad_text_for(name: str, surrogates: bool = True) -> st.SearchStrategy[str]:
    """Text that is not a valid value of parameter ``name``."""
    p = PARAMS[name]
    if p.kind is str:
        parts = st.one_of(st.sampled_from(CHOICES), st.sampled_from(["", " ", "nosuch", "uniform", "UNIFORM-D3"]),
                          st.text(max_size=12))
        return st.one_of(st.lists(parts, min_size=1, max_size=5).map(",".join), junk_text(surrogates),
                         st.sampled_from(CHOICES).map(lambda c: f"{c},{c}")).filter(lambda t: not _valid_settings(t))
    numbers = []  # finite numbers outside the parameter's domain
    if p.low is not None:
        if p.kind is int:
            numbers.append(st.integers(min_value=-(10 ** 500), max_value=math.ceil(p.low) - 1))
        numbers.append(st.floats(max_value=p.low, allow_nan=False))
    if p.high is not None:
        numbers.append(st.integers(min_value=int(p.high) + 1, max_value=10 ** 500))
        numbers.append(st.floats(min_value=p.high, exclude_min=True, allow_infinity=False))
    if p.kind is int:
        numbers.append(st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()))
    if p.power_of_two:
        numbers.append(st.integers(min_value=int(p.low), max_value=int(p.high)).filter(lambda v: v & (v - 1)))
    return st.one_of(
        junk_text(surrogates),
        st.sampled_from(NON_FINITE),
        st.one_of(*numbers).filter(lambda x: not _valid_number(name, x)).map(repr),
    )


# ----------------------------------------------------------------------------------------------
# the Python API


@st.composite
def bad_override(draw):
    name = draw(st.sampled_from(sorted(PARAMS)))
    return name, draw(bad_text_for(name))


# regressions: inputs that crashed or were accepted before this file existed
@fuzz(250)
@given(bad_override())
@example(("n_blocks", "1" + "0" * 400))  # OverflowError in float()
@example(("tau", "1" + "0" * 400))
@example(("k_max", "9" * 4400))  # past int()'s digit limit
@example(("settings", "vmf-d3, vmf-d3"))  # accepted: two cells with the same seeds and checkpoints
def test_resolve_config_and_param_parse_reject_bad_text(case):
    name, text = case
    for call in (lambda: resolve_config(STUDY, {name: text}), lambda: PARAMS[name].parse(text)):
        with pytest.raises(ValueError) as info:
            call()
        msg = str(info.value)
        assert f"'{name}'" in msg and "\n" not in msg and len(msg) < 400, msg


ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10 ** 5000), max_value=10 ** 5000),
    st.floats(), st.text(max_size=30), st.binary(max_size=10), st.lists(st.integers(), max_size=3),
    st.complex_numbers(), st.fractions(), st.decimals(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(np.float64, st.floats()), st.builds(np.int64, st.integers(-(2 ** 63), 2 ** 63 - 1)),
    st.builds(np.float32, st.floats(width=32)), st.builds(np.bool_, st.booleans()),
    st.sampled_from([np.array(16), np.array([16, 32]), float("nan"), -0.0, 1 << 10, 2 ** 63, [1], (16,), {16}]),
)


@fuzz(150)
@given(st.sampled_from(sorted(PARAMS)), ANY_VALUE)
@example("tau", 10 ** 400)  # OverflowError
@example("n_blocks", -(10 ** 400))
@example("k_max", 10 ** 5000)  # its repr() raises
def test_any_python_value_is_rejected_or_valid(name, value):
    """Whatever is passed, resolve_config rejects it naming the parameter, or the value it accepts
    has the parameter's type, is finite, and respects its bounds: no NaN reaches a study."""
    p = PARAMS[name]
    try:
        cfg = resolve_config(STUDY, {name: value})
    except ValueError as exc:
        msg = str(exc)
        assert f"'{name}'" in msg and "\n" not in msg and len(msg) < 400, msg
        return
    v = cfg[name]
    if v is None:
        assert value is None and p.default is None
    elif p.kind is str:
        assert isinstance(v, str) and _valid_settings(v)
    else:
        assert type(v) is p.kind and _valid_number(name, v), (value, v)


@fuzz(40)
@given(st.one_of(st.text(), st.sampled_from(["", " k_max", "K_MAX", "seed", "quick", "k-max", "settings "])))
@example("k_\nmax")  # the message took two lines
def test_unknown_parameter_names(name):
    if name in PARAMS:
        return
    with pytest.raises(ValueError, match=r"^unknown parameter .* for study rate_k; known: ") as info:
        resolve_config(STUDY, {name: "1"})
    assert "\n" not in str(info.value)


@fuzz(40)
@given(st.one_of(st.text(), st.none(), st.integers(), st.floats(), st.lists(st.text(), max_size=2),
                 st.sampled_from(["RATE_K", "rate_k ", "rate-k", "studies.rate_k", ""])))
def test_get_study_unknown(name):
    if isinstance(name, str) and name in STUDIES:
        return
    with pytest.raises(ValueError, match="unknown study") as info:
        get_study(name)
    assert "\n" not in str(info.value)


@fuzz(40)
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=2 ** 63, max_value=10 ** 5000), st.floats(),
                 st.text(max_size=10), st.booleans(), st.builds(np.float64, st.floats())))
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="'seed'") as info:
        resolve_config(STUDY, seed=seed)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


# a bool parameter and a single-choice text parameter, as other studies declare them
FLAG = Param("flag", bool, False, "a switch")
MODE = Param("mode", str, "fast", "a mode", choices=("fast", "exact"))
BOOL_WORDS = {"1", "true", "yes", "on", "0", "false", "no", "off"}


@pytest.mark.parametrize("param, value", [(FLAG, 1), (MODE, None), (PARAMS["k_max"], [16]), (PARAMS["tau"], b"1"),
                                          (PARAMS["settings"], 3)])
def test_param_parse_non_text(param, value):
    """Not text: validated as by ``Param.validate`` (it raised AttributeError before)."""
    with pytest.raises(ValueError, match=f"'{param.name}'"):
        param.parse(value)
    assert PARAMS["k_max"].parse(16) == 16


@fuzz(60)
@given(st.sampled_from([FLAG, MODE]), st.one_of(junk_text(), st.sampled_from(["fast,exact", "2", "y", "Fast "])))
def test_param_parse_bool_and_choice(param, text):
    ok = text.strip().lower() in BOOL_WORDS if param is FLAG else text in MODE.choices
    if ok:
        return
    with pytest.raises(ValueError, match=f"'{param.name}'"):
        param.parse(text)


# ----------------------------------------------------------------------------------------------
# distribution and kernel constructors

NOT_REAL = [None, "1.0", "abc", b"1", [1.0], (1.0, 2.0), {"a": 1}, 1j, 1 + 0j, True, False, np.array([1.0, 2.0]),
            float("nan"), float("inf"), -float("inf"), np.float64("nan"), 10 ** 400, Decimal("1"), object()]


def bad_real(low=None, high=None, low_open=False):
    out = [st.sampled_from(NOT_REAL)]
    if low is not None:
        out.append(st.floats(max_value=low, allow_nan=False).filter(lambda v: v <= low if low_open else v < low))
    if high is not None:
        out.append(st.floats(min_value=high, exclude_min=True, allow_infinity=False))
    return st.one_of(*out)


def bad_int(low):
    not_int = [x for x in NOT_REAL if not (isinstance(x, int) and not isinstance(x, bool))]
    return st.one_of(st.sampled_from([*not_int, 1.5, 2.5, -0.5]),
                     st.integers(max_value=low - 1),
                     st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not v.is_integer()))


def _unit(d):
    e = np.zeros(d)
    e[0] = 1.0
    return e


def bad_points(ndim: int):
    """Not an array of unit vectors with ``ndim`` dimensions (the last of length >= 2)."""
    shape = (3,) if ndim == 1 else (2, 3)
    scaled = st.floats(0.0, 10.0).filter(lambda s: abs(s - 1.0) > 1e-5).map(lambda s: s * np.ones(shape) / np.sqrt(3))
    return st.one_of(
        scaled,
        st.sampled_from([None, "abc", [["a", "b"]], [[1.0, 0.0], [1.0]], np.full(shape, np.nan), np.full(shape, np.inf),
                         np.array(1.0), np.ones((1,)), np.ones((2, 1)), np.zeros((0,)), [1j, 0.0],
                         np.eye(3)[None] if ndim == 2 else np.eye(3), np.zeros(shape)]),
    )


ROTATIONS = [np.diag([1.0, -1.0]), np.diag([-1.0, 1.0, 1.0]), np.ones((2, 2)), np.ones((2, 3)), np.eye(1), np.eye(2)[0],
             np.full((2, 2), np.nan), "abc", None, [[1, 0], [0]], 2 * np.eye(3), np.eye(3)[::-1]]


def constructor_cases():
    """(callable, argument name) pairs that must raise ValueError naming the argument."""
    from simkit import BrownianKernel
    try:
        BrownianKernel(1.0)
        brownian = [st.builds(lambda t: (lambda: BrownianKernel(t), "t"), bad_real(low=0.0, low_open=True))]
    except NotImplementedError:  # pragma: no cover - the placeholder before it was implemented
        brownian = []
    mus = np.stack([_unit(3), -_unit(3)])
    return st.one_of(
        st.builds(lambda d: (lambda: Uniform(d), "dim"), bad_int(2)),
        st.builds(lambda k: (lambda: VMFKernel(k), "kappa"), bad_real(low=0.0, high=1e6)),
        st.builds(lambda k: (lambda: VonMisesFisher(_unit(3), k), "kappa"), bad_real(low=0.0, high=1e6)),
        st.builds(lambda m: (lambda: VonMisesFisher(m, 1.0), "mu"), bad_points(1)),
        st.builds(lambda r: (lambda: RotatedVMFKernel(r, 1.0), "rotation"), st.sampled_from(ROTATIONS)),
        st.builds(lambda k: (lambda: RotatedVMFKernel(np.eye(3), k), "kappa"), bad_real(low=0.0, high=1e6)),
        st.builds(lambda s: (lambda: GeodesicRandomWalk(s, 1), "step"), bad_real(low=0.0, high=np.pi, low_open=True)),
        st.builds(lambda n: (lambda: GeodesicRandomWalk(0.1, n), "n_steps"), bad_int(1)),
        st.builds(lambda w: (lambda: VMFMixture(w, mus, [1.0, 2.0]), "weights"),
                  st.one_of(st.lists(st.floats(-1, 2), min_size=2, max_size=2).filter(
                      lambda w: min(w) < 0 or abs(sum(w) - 1) > 1e-8),
                      st.sampled_from([[1.0], [0.5, 0.5, 0.0], [[0.5, 0.5]], [np.nan, 1.0], "ab", None, []]))),
        st.builds(lambda m: (lambda: VMFMixture([0.5, 0.5], m, [1.0, 2.0]), "mus"), bad_points(2)),
        st.builds(lambda k: (lambda: VMFMixture([0.5, 0.5], mus, k), "kappas"),
                  st.one_of(bad_real(low=0.0, high=1e6).map(lambda k: [1.0, k]),
                            st.sampled_from([[1.0], [1.0, 2.0, 3.0], "ab", None, [[1.0, 2.0]], 1.0]))),
        st.builds(lambda p: (lambda: Discrete(p), "points"), bad_points(2)),
        st.builds(lambda w: (lambda: Discrete(mus, w), "weights"),
                  st.sampled_from([[1.0], [0.7, 0.7], [-0.5, 1.5], [np.inf, 0.0], "x", [[0.5], [0.5]]])),
        *brownian,
    )


@fuzz(160)
@given(constructor_cases())
def test_constructors_reject_bad_arguments(case):
    build, name = case
    with pytest.raises(ValueError) as info:
        build()
    msg = str(info.value)
    assert f"'{name}" in msg and "\n" not in msg, msg


# ----------------------------------------------------------------------------------------------
# the command line, in-process

FAST_FAILING_SCHEDULERS = ["", "abc", "tcp://", "tcp://:", ":8786x", "nosuch://x", "tcp://127.0.0.1:1",
                           "tcp://h:0", "tcp://127.0.0.1:99999", "tcp://[::1"]


@st.composite
def bad_cli(draw):
    """(arguments after ``run``, text the one stderr line must contain)."""
    kind = draw(st.sampled_from(["value", "value", "value", "unknown", "no_eq", "twice", "seed", "out", "report",
                                 "study", "scheduler", "stray"]))
    text = junk_text(surrogates=False)
    if kind == "value":
        name = draw(st.sampled_from(sorted(PARAMS)))
        return ["rate_k", "--set", f"{name}={draw(bad_text_for(name, surrogates=False))}"], f"'{name}'"
    if kind == "unknown":
        name = draw(st.one_of(text, st.sampled_from(["K_MAX", "seed", "kmax", "k max"]))).strip()
        if not name or "=" in name or name in PARAMS or name.startswith("-"):
            name = "no_such_parameter"
        return ["rate_k", "--set", f"{name}=1"], "unknown parameter"
    if kind == "no_eq":
        item = draw(st.one_of(text, st.sampled_from(["tau", "tau 0.5", "=0.5", " =1", "k_max:16"])))
        item = item.replace("=", "") if not item.lstrip().startswith("=") else item
        return ["rate_k", "--set", item], "--set"
    if kind == "twice":
        name = draw(st.sampled_from(sorted(PARAMS)))
        return ["rate_k", "--set", f"{name}={TINY.get(name, '1')}", "--set", f"{name}={draw(text)}"], "twice"
    if kind == "seed":
        seed = draw(st.one_of(text, st.integers(max_value=-1).map(str),
                              st.integers(min_value=2 ** 63, max_value=10 ** 400).map(str),
                              st.floats().map(repr), st.sampled_from(["1.5", "1e3", "0x10", "-0", "-1"])))
        if _parses(int, seed) and 0 <= int(seed) < 2 ** 63:
            seed = "-1"
        return ["rate_k", "--seed", seed], "--seed"
    if kind in ("out", "report"):
        suffix = ".nc" if kind == "out" else ".pdf"
        path = draw(st.one_of(text, st.sampled_from(["x.txt", "x", "x.nc.bak", ".nc", "x.pdf", "x.NC4", "dir/",
                                                     "x" * 300 + suffix, "a\x00" + suffix])))
        if path.lower().endswith(suffix) and len(path) < 250 and "\x00" not in path:
            path += ".bak"
        return ["rate_k", f"--{kind}", path], f"--{kind}"
    if kind == "study":
        study = draw(st.one_of(text, st.sampled_from(["RATE_K", "rate-k", "rate_k ", "nosuch"])))
        if study in STUDIES or study.startswith("-") or not study:
            study = "nosuch"
        return [study], "unknown study"
    if kind == "scheduler":
        return ["rate_k", "--scheduler", draw(st.sampled_from(FAST_FAILING_SCHEDULERS))], "--scheduler"
    stray = draw(text)
    if stray.startswith("-") or not stray:
        stray = "extra"
    return ["rate_k", stray], "unrecognized arguments"


def _no_run(*args, **kwargs):
    raise AssertionError("bad input reached run_study")


@fuzz(250)
@given(case=bad_cli())
@example(case=(["rate_k", "--out", "a\x00.nc"], "--out"))  # ValueError from mkdir, once the run had started
@example(case=(["rate_k", "--out", "x" * 300 + ".nc"], "--out"))  # OSError (name too long), idem
@example(case=(["rate_k", "extra\nline"], "unrecognized arguments"))  # two stderr lines
@example(case=(["rate_k", "--set", "k_max=16", "--set", "k_\nmax=16"], "unknown parameter"))
@example(case=(["rate_k", "--scheduler", "abc"], "--scheduler"))  # traceback and a checkpoint directory
def test_cli_bad_input(case, tmp_path, monkeypatch, capsys):
    args, token = case
    monkeypatch.chdir(tmp_path)  # a default output path would land here
    monkeypatch.setattr(engine, "run_study", _no_run)
    given_names = {a.split("=")[0] for a in args if "=" in a}
    argv = ["run", *args]
    for name, value in TINY.items():
        if name not in given_names:
            argv += ["--set", f"{name}={value}"]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "out.nc")]
    argv += ["--no-progress", "--no-report"]
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    captured = capsys.readouterr()
    assert status == 2, (argv, captured.err)
    err = captured.err
    assert err.startswith("simkit: error:") and err.endswith("\n") and err.count("\n") == 1, err
    assert token in err and "Traceback" not in err, (token, err)
    assert captured.out == ""
    assert os.listdir(tmp_path) == []  # no dataset, report, checkpoint directory or temporary file


# ----------------------------------------------------------------------------------------------
# the command line, as a real process: regressions of inputs that used to crash


@pytest.fixture(scope="module")
def a_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("file") / "not_a_directory"
    path.write_text("")
    return path


SUBPROCESS_CASES = [
    # an integer of 401 digits: OverflowError in float() (traceback)
    (["--set", "n_blocks=1" + "0" * 400], "'n_blocks'"),
    # an unreachable scheduler: traceback, and a checkpoint directory left behind
    (["--scheduler", "tcp://127.0.0.1:1"], "'--scheduler'"),
    # an output path inside a regular file: NotADirectoryError (traceback) once the run started
    (["--out", "{a_file}/x.nc"], "'--out'"),
    # a parameter name with a newline: the message took two lines
    (["--set", "k_\nmax=16"], "unknown parameter 'k_\\nmax'"),
]


@pytest.mark.parametrize("args, token", SUBPROCESS_CASES, ids=["huge-int", "scheduler", "out-in-file", "newline"])
def test_cli_bad_input_subprocess(args, token, a_file, tmp_path):
    args = [a.format(a_file=a_file) for a in args]
    sets = [a for name, value in TINY.items() if not any(x.startswith(f"{name}=") for x in args)
            for a in ("--set", f"{name}={value}")]
    out = [] if "--out" in args else ["--out", str(tmp_path / "out.nc")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "simkit.cli", "run", "rate_k", *args, *sets, *out, "--no-progress",
                          "--no-report"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("simkit: error:"), res.stderr[-3000:]
    assert token in res.stderr and res.stdout == ""
    assert os.listdir(tmp_path) == []
    assert a_file.read_text() == ""
