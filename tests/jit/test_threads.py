"""``run_chunks``: every chunk is filled exactly once, whatever the number of threads, errors
reach the caller, and the threaded samplers give the same bits on one thread and on several
(each chunk has its own stream)."""

from __future__ import annotations

import threading
import time

import numba
import numpy as np
import pytest

from simkit._jit.sampling import sample_uniform, sample_vmf
from simkit._jit.threads import run_chunks


def _recording_kernel(log, lock):
    def kernel(tag, c0, c1):
        with lock:
            log.append((tag, c0, c1, threading.get_ident()))
    return kernel


@pytest.mark.parametrize("n_chunks", [1, 2, 3, 7, 8, 9, 100])
def test_every_chunk_once(n_chunks):
    log, lock = [], threading.Lock()
    run_chunks(_recording_kernel(log, lock), n_chunks, "t")
    covered = sorted(c for _, c0, c1, _ in log for c in range(c0, c1))
    assert covered == list(range(n_chunks))
    assert all(tag == "t" and c1 > c0 for tag, c0, c1, _ in log)


def test_one_thread_is_one_call_on_the_callers_thread():
    log, lock = [], threading.Lock()
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        run_chunks(_recording_kernel(log, lock), 50, "t")
    finally:
        numba.set_num_threads(old)
    assert [(c0, c1) for _, c0, c1, _ in log] == [(0, 50)]
    assert log[0][3] == threading.get_ident()


def test_error_reaches_the_caller():
    def kernel(c0, c1):
        if c0 <= 3 < c1:
            raise ValueError("chunk 3")
    with pytest.raises(ValueError, match="chunk 3"):
        run_chunks(kernel, 16)


two_threads = pytest.mark.skipif(numba.get_num_threads() < 2, reason="needs two Numba threads")


@two_threads
def test_returns_after_every_piece():
    main, done, lock, started = threading.get_ident(), [], threading.Lock(), threading.Event()

    def kernel(c0, c1):
        if threading.get_ident() != main:
            started.set()
            time.sleep(0.2)  # a pool thread's piece finishes after the caller's
        else:
            started.wait(5.0)  # the caller goes on once a pool thread holds a piece
        with lock:
            done.extend(range(c0, c1))
    run_chunks(kernel, 16)
    assert sorted(done) == list(range(16))


@two_threads
def test_error_on_a_pool_thread_reaches_the_caller():
    main, started = threading.get_ident(), threading.Event()

    def kernel(c0, c1):
        if threading.get_ident() != main:
            started.set()
            raise ValueError("pool piece")
        started.wait(5.0)
    with pytest.raises(ValueError, match="pool piece"):
        run_chunks(kernel, 16)


@two_threads
def test_same_bits_on_one_and_two_threads():
    rng = np.random.default_rng(7)
    d, n = 5, 5 * 512 + 17
    mus = rng.normal(size=(n, d))
    mus /= np.linalg.norm(mus, axis=1, keepdims=True)
    kappas = np.exp(rng.uniform(-3.0, 8.0, size=n))
    key = np.array([11, 12], dtype=np.uint64)
    outs = []
    old = numba.get_num_threads()
    try:
        for t in (1, 2):
            numba.set_num_threads(t)
            v, u = np.empty((n, d)), np.empty((n, d))
            sample_vmf(mus, kappas, key, v)
            sample_uniform(key, u)
            outs.append((v.tobytes(), u.tobytes()))
    finally:
        numba.set_num_threads(old)
    assert outs[0] == outs[1]


@two_threads
def test_a_forked_child_gets_its_own_pool():
    import multiprocessing as mp
    run_chunks(lambda c0, c1: None, 8)  # the parent's pool exists
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_count_in_child).get(timeout=60)
    assert got == list(range(8))


def _count_in_child():
    done, lock = [], threading.Lock()

    def kernel(c0, c1):
        time.sleep(0.01)
        with lock:
            done.extend(range(c0, c1))
    run_chunks(kernel, 8)
    return sorted(done)
