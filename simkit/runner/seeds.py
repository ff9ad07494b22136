"""Seeds of study tasks: one ``SeedSequence`` per (study, cell, stage, block).

``SeedSequence(entropy=seed, spawn_key=(*cell_key(study, cell), stage, block))``, where
``cell_key`` is four 32-bit words of the SHA-256 of the study's name and the cell's canonical JSON.
Results depend only on the seed, the study and the cell — never on worker count, order,
chunking, engine or resumption — and two studies never share random numbers, even for cells
with the same coordinates.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

__all__ = ["canonical", "cell_key", "task_seed", "task_name", "SEED_SCHEME", "common_seeds", "block_of"]

#: the scheme, as recorded in every dataset's ``seed_scheme`` attribute
SEED_SCHEME = ("SeedSequence(seed, spawn_key=(*cell_key, stage, block)); cell_key = 4 x uint32 of SHA-256 "
               "of the study name and the cell's canonical JSON (variable cell_key); stage 0 = prepare, 1 = block, "
               "2 = part of a split preparation (block = part index)")


def canonical(obj: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): the text that keys and hashes are made of."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=float)


def _digest(study: str, cell: dict) -> bytes:
    if not isinstance(study, str) or not study:
        raise ValueError(f"'study' must be a non-empty study name, got {study!r}")
    return hashlib.sha256(canonical({"study": study, "cell": cell}).encode()).digest()


def cell_key(study: str, cell: dict) -> tuple[int, int, int, int]:
    """Four 32-bit words of SHA-256 of ``{"study": study, "cell": cell}``: the cell's part of every seed."""
    digest = _digest(study, cell)
    return tuple(int.from_bytes(digest[4 * i:4 * i + 4], "little") for i in range(4))


def task_seed(seed: int, study: str, cell: dict, stage: int, block: int) -> np.random.SeedSequence:
    """``SeedSequence(seed, spawn_key=(*cell_key(study, cell), stage, block))``; stage 0 = prepare, 1 = block,
    2 = part ``block`` of a preparation split into parts (:meth:`simkit.runner.Study.prepare_parts`)."""
    return np.random.SeedSequence(entropy=int(seed), spawn_key=(*cell_key(study, cell), int(stage), int(block)))


def common_seeds(seed: int, study: str, group: dict, block: int, n: int) -> list[np.random.SeedSequence]:
    """Seeds of replicate ``block`` shared by every cell of a ``group`` (common random numbers across cells).

    ``task_seed(seed, study, group, 1, block).spawn(n)``: the group (e.g. ``{"sweep": "n"}``) stands in
    for the cell, so all cells of the group draw the same random numbers in a block, from the study seed
    alone, and no other group or study draws them. A study's ``generate`` calls it with the block of its
    engine generator (:func:`block_of`).
    """
    return task_seed(seed, study, group, 1, block).spawn(n)


def block_of(rng: np.random.Generator) -> int:
    """The block index of an engine task's generator (its seed's spawn key ends with (stage 1, block))."""
    key = getattr(getattr(rng.bit_generator, "seed_seq", None), "spawn_key", ())
    if len(key) < 2 or key[-2] != 1:
        raise ValueError("'rng' must be the generator the engine passes to generate() (SeedSequence with spawn key "
                         "(*cell_key, 1, block)); call generate through simkit.runner.run_study")
    return int(key[-1])


def task_name(study: str, cell: dict, stage: int, block: int) -> str:
    """The checkpoint file stem of a task (stage 0: the cell's preparation, combined from its parts
    if it has any; 1: block ``block``; 2: preparation part ``block``)."""
    h = _digest(study, cell).hex()[:16]
    if stage == 0:
        return f"{h}-prep"
    return f"{h}-p{block:05d}" if stage == 2 else f"{h}-b{block:05d}"
