"""The named design settings: the cells a study builds from a catalogue, with and without overrides."""

import pytest

from simkit.distributions.designs import RATE_SETTINGS, SEARCH_SETTINGS, vmf_cells

NO_OVERRIDE = {"dim": None, "kappa_pi": None, "kappa_m": None, "tau": None}


@pytest.mark.deterministic("exact equality of the cell dictionaries built from the catalogue")
def test_cells_follow_the_catalogue():
    cells = vmf_cells(RATE_SETTINGS, {"settings": "uniform-d3,vmf-d8", **NO_OVERRIDE})
    assert cells == [
        {"setting": "uniform-d3", "pi": "uniform", "dim": 3, "kappa_pi": 0.0, "kappa_m": 10.0, "tau": 0.1},
        {"setting": "vmf-d8", "pi": "vmf", "dim": 8, "kappa_pi": 2.0, "kappa_m": 10.0, "tau": 0.2}]
    # the key order is part of a cell's identity (the runner hashes cells into seeds): keep it
    assert list(cells[0]) == ["setting", "pi", "dim", "kappa_pi", "kappa_m", "tau"]


@pytest.mark.deterministic("exact equality of the cell dictionaries built from the catalogue")
def test_overrides_apply_to_every_setting_but_kappa_pi_of_uniform():
    cfg = {"settings": "uniform-d3,mixture-d16", "dim": 5, "kappa_pi": 3.0, "kappa_m": 7.0, "tau": 0.5}
    cells = vmf_cells(SEARCH_SETTINGS, cfg)
    assert [(c["dim"], c["kappa_pi"], c["kappa_m"], c["tau"]) for c in cells] == [(5, 0.0, 7.0, 0.5),
                                                                                 (5, 3.0, 7.0, 0.5)]
    # the two catalogues differ in the mixture's kernel (20 against 10): the catalogue is the one given
    plain = {"settings": "mixture-d16", **NO_OVERRIDE}
    assert vmf_cells(RATE_SETTINGS, plain)[0]["kappa_m"] == 20.0
    assert vmf_cells(SEARCH_SETTINGS, plain)[0]["kappa_m"] == 10.0


def test_unknown_setting_names_the_setting():
    with pytest.raises(KeyError, match="no-such"):
        vmf_cells(RATE_SETTINGS, {"settings": "no-such", **NO_OVERRIDE})
