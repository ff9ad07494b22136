"""The engine's resume guarantee, checked once per study type by its test module."""

from __future__ import annotations

from simkit.runner import read_dataset, results_identical, run_study


def assert_resume_identical(study, cfg: dict, tmp_path, stop_after: int, capsys=None):
    """Run ``cfg`` uninterrupted; run it again stopped after ``stop_after`` tasks (no dataset, the
    interruption reported on stderr when ``capsys`` is given), then resumed: the resumed dataset, in
    memory and on disk, must equal the uninterrupted one (engine.results_identical). Returns the
    uninterrupted run."""
    ref = run_study(study, cfg, tmp_path / "ref.nc", progress=False)
    assert ref.completed and not ref.errors
    out = tmp_path / "resumed.nc"
    part = run_study(study, cfg, out, progress=False, stop_after=stop_after)
    assert not part.completed and part.n_done == stop_after and part.dataset is None and not out.exists()
    if capsys is not None:
        assert "interrupted" in capsys.readouterr().err
    done = run_study(study, cfg, out, progress=False)
    assert done.completed and done.dataset.attrs["resumed_tasks"] == stop_after
    assert results_identical(ref.dataset, done.dataset)
    assert results_identical(ref.dataset, read_dataset(out))
    return ref
