"""List-valued parameters (``Param(..., multi=True)`` of int or float), the geometric design grid, and
the seeds shared by a group of cells (common random numbers): simkit.runner.params and .seeds.
All deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.runner import Param, block_of, common_seeds, level_grid, task_seed

DS = Param("ds", int, "6,8,16", "dimensions", multi=True, min_items=3, low=6, multiple_of=2,
           items_doc="even dimensions >= 6")
TAUS = Param("taus", float, "1,0.5", "temperatures", multi=True, min_items=2, low=0.0, low_open=True,
             descending=True, items_doc="positive numbers")
RANGE = Param("r", float, "0.1,1,10", "in a range", multi=True, min_items=3, low=0.02, high=100.0)


def test_values_are_sorted_and_the_text_is_kept():
    assert DS.values("16, 6,8") == [6, 8, 16] and all(type(v) is int for v in DS.values("16,6,8"))
    assert TAUS.values("0.1,1,0.5") == [1.0, 0.5, 0.1]
    assert RANGE.values("100,0.02,1") == [0.02, 1.0, 100.0]
    # the configuration keeps the text (JSON-friendly, as --set gave it, stripped)
    assert DS.parse(" 6,8,16 ") == "6,8,16" and TAUS.validate("0.5,0.1") == "0.5,0.1"
    assert DS.validate([16, 8, 6]) == "16,8,6"


@pytest.mark.parametrize("param, text, match", [
    (DS, "6,7,8", "'ds' must list at least three distinct even dimensions >= 6, got '6,7,8'"),
    (DS, "4,6,8", "'ds' must list at least three distinct even dimensions >= 6"),
    (DS, "6,8", "'ds' must list at least three distinct"),
    (DS, "6,8,8", "'ds' must list at least three distinct"),
    (DS, "6,8,x", "'ds' must be comma-separated integers, got '6,8,x'"),
    (DS, "6,8,10.0", "'ds' must be comma-separated integers"),
    (TAUS, "0.1", "'taus' must list at least two distinct positive numbers, got '0.1'"),
    (TAUS, "0.1,0", "'taus' must list at least two distinct positive numbers"),
    (TAUS, "0.1,nan", "'taus' must list at least two distinct positive numbers"),
    (TAUS, "0.1,inf", "'taus' must list at least two distinct positive numbers"),
    (TAUS, "a,b", "'taus' must be comma-separated numbers"),
    (RANGE, "0.01,1,10", "'r' must list at least three distinct numbers, got"),
    (RANGE, "0.1,1,101", "'r' must list at least three distinct numbers"),
])
def test_bad_lists_give_one_line_naming_the_parameter(param, text, match):
    for call in (param.parse, param.validate, param.values):
        with pytest.raises(ValueError, match=match) as err:
            call(text)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="'ds' must be a comma-separated list"):
        DS.validate(6.0)
    with pytest.raises(TypeError, match="not a list of numbers"):
        Param("n", int, 3, "an int").values("3")


def test_one_item_lists():
    eps = Param("eps", float, "0.1", "in (0, 1]", multi=True, low=0.0, low_open=True, high=1.0,
                items_doc="numbers in (0, 1]")
    assert eps.values("0.5") == [0.5] and eps.values("0.5,0.1") == [0.1, 0.5]
    for bad in ("", "0.1,0.1", "0.1,2", "0"):
        with pytest.raises(ValueError, match="^'eps' must list distinct numbers in \\(0, 1\\], got "):
            eps.parse(bad)


def test_level_grid():
    assert level_grid(32, 4096, 2) == [32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert level_grid(1, 256, 4) == [1, 4, 16, 64, 256]
    assert level_grid(1, 255, 4) == [1, 4, 16, 64]
    assert level_grid(8, 4, 2) == []


def test_common_seeds_are_shared_by_a_group_and_only_by_it():
    """common_seeds(seed, study, group, block, n) is task_seed(seed, study, group, 1, block).spawn(n): the same
    for every cell of the group, different across blocks, groups, studies and seeds."""
    state = lambda seqs: [q.generate_state(4).tolist() for q in seqs]  # noqa: E731
    a = common_seeds(7, "study", {"sweep": "n"}, 2, 3)
    assert len(a) == 3
    assert state(a) == state(task_seed(7, "study", {"sweep": "n"}, 1, 2).spawn(3))
    for other in (common_seeds(7, "study", {"sweep": "n"}, 3, 3), common_seeds(7, "study", {"sweep": "k"}, 2, 3),
                  common_seeds(7, "other", {"sweep": "n"}, 2, 3), common_seeds(8, "study", {"sweep": "n"}, 2, 3)):
        assert all(x != y for x, y in zip(state(a), state(other)))


def test_block_of_reads_the_engine_generator():
    rng = np.random.default_rng(task_seed(1, "study", {"point": "a"}, 1, 5))
    assert block_of(rng) == 5
    with pytest.raises(ValueError, match="'rng' must be the generator the engine passes"):
        block_of(np.random.default_rng(1))
    with pytest.raises(ValueError, match="'rng' must be the generator the engine passes"):
        block_of(np.random.default_rng(task_seed(1, "study", {"point": "a"}, 0, 5)))  # a prepare task


def test_unsorted_lists_powers_of_two_and_empty():
    sizes = Param("sizes", int, "32,8", "block sizes", multi=True, min_items=0, low=8, power_of_two=True, sort=False,
                  items_doc="powers of two >= 8")
    assert sizes.values("32,8,1024") == [32, 8, 1024] and sizes.values("") == [] and sizes.parse("") == ""
    for bad in ("48", "4", "8,8"):
        with pytest.raises(ValueError, match="^'sizes' must list distinct powers of two >= 8, got "):
            sizes.values(bad)
