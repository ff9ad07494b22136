"""The worker plugin that :class:`simkit.runner.dask.DaskExecutor` registers (imports ``distributed``)."""

from __future__ import annotations

from distributed import WorkerPlugin

from simkit.runner._malloc import tune_malloc

__all__ = ["MallocTuning", "PLUGIN_NAME"]

PLUGIN_NAME = "simkit-malloc"


class MallocTuning(WorkerPlugin):
    """Runs :func:`simkit.runner._malloc.tune_malloc` in every worker process, present and future."""

    name = PLUGIN_NAME

    def setup(self, worker):
        tune_malloc()
