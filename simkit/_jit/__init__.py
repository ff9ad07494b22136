"""Numba cores shared across simkit (private): random numbers, sphere samplers, ``log``/``log1p``
bit-compatible with the C library, special functions, and the streaming sums behind the InfoNCE,
similarity-search and training estimators. Each public wrapper validates its arguments and calls in
here; nothing is imported eagerly, so a run compiles only what it uses.
"""
