"""A kernel's inputs reach it in one compiled form: read-only or strided parameters of
``sample_vmf`` are passed as writable C-contiguous arrays (a second specialisation is a second
full compile), with the same draws."""

from __future__ import annotations

import numpy as np
from numba import types

from simkit._jit.sampling import _sample_vmf, _writable_c, sample_vmf


def test_writable_c_copies_only_when_needed():
    a = np.ones((4, 3))
    assert _writable_c(a) is a  # already writable and C-contiguous: no copy
    ro = np.ones((4, 3))
    ro.flags.writeable = False
    w = _writable_c(ro)
    assert w.flags.writeable and w.flags.c_contiguous and w is not ro and np.array_equal(w, ro)
    strided = np.ones((4, 6))[:, ::2]
    assert _writable_c(strided).flags.c_contiguous


def test_read_only_parameters_share_the_writable_specialisation():
    mu = np.array([[0.6, 0.0, 0.8]])
    kappa = np.array([5.0])
    key = np.array([12345, 678910], dtype=np.uint64)
    out_w = np.empty((300, 3))
    sample_vmf(mu, kappa, key, out_w)
    for a in (mu, kappa, key):
        a.flags.writeable = False
    out_ro = np.empty((300, 3))
    sample_vmf(mu, kappa, key, out_ro)
    assert np.array_equal(out_w, out_ro)
    assert all(not (isinstance(t, types.Array) and not t.mutable) for sig in _sample_vmf.signatures for t in sig)
