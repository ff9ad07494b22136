"""The study runner: parameters, the Study protocol and its registry, seeds, storage, provenance,
executors (in-process, Dask) and the run itself.

Modules: :mod:`~simkit.runner.params` (``Param``, ``resolve_config``), :mod:`~simkit.runner.study`
(``Study``, ``Var``, ``Check``, entry-point registry), :mod:`~simkit.runner.seeds`,
:mod:`~simkit.runner.storage` (atomic writes, checkpoints, CF netCDF), :mod:`~simkit.runner.memory` (the
memory check of a design), :mod:`~simkit.runner.provenance`, :mod:`~simkit.runner.executors` and
:mod:`~simkit.runner.dask`, :mod:`~simkit.runner.run`; :mod:`~simkit.runner.schema` (``estimate_vars``,
``verdict_vars``: the value / MCSE / raw and verdict / reason entries of a schema) and
:mod:`~simkit.runner.verdicts` (``verdict``, ``check_result``, ``claim_summary``: one way to assemble verdicts).
"""

from __future__ import annotations

from simkit.runner._malloc import tune_malloc
from simkit.runner.executors import DependencyFailed, Executor, ExecutorLost, InProcessExecutor, SummaryFailed
from simkit.runner.memory import InsufficientMemory, PeakMemory, available_memory, check_memory
from simkit.runner.params import Param, level_grid, resolve_config
from simkit.runner.run import (RunResult, apply_schema, check_dataset, execute_task, make_executor, run_study,
                               summarise_dataset)
from simkit.runner.schema import BLOCK_MCSE, block_means, cell_grid, estimate_vars, rate_vars, verdict_vars
from simkit.runner.seeds import SEED_SCHEME, block_of, canonical, cell_key, common_seeds, task_name, task_seed
from simkit.runner.storage import (VOLATILE_ATTRS, Checkpoint, CheckpointMismatch, OutputBusy, RunLock, WriteFailed,
                                   check_writable, read_dataset, results_identical, write_dataset)
from simkit.runner.study import ENTRY_POINT_GROUP, Check, Study, UndeclaredVariable, Var, get_study, study_names
from simkit.runner.verdicts import (TASK_FAILED, Verdict, cell_detail, cell_errors, check_result, claim_summary,
                                    dataset_config, estimate_table, not_finite, one_pvalue, outcome, recorded_sha,
                                    scalar, settings_check, verdict)

__all__ = [
    "Param", "resolve_config", "Study", "Var", "Check", "UndeclaredVariable", "get_study", "study_names",
    "ENTRY_POINT_GROUP", "run_study", "summarise_dataset", "RunResult", "execute_task", "apply_schema", "cell_key", "task_seed",
    "common_seeds", "block_of", "level_grid", "task_name", "canonical", "SEED_SCHEME", "Checkpoint", "read_dataset",
    "write_dataset", "results_identical",
    "VOLATILE_ATTRS", "Executor", "InProcessExecutor", "DependencyFailed", "ExecutorLost", "SummaryFailed", "make_executor",
    "OutputBusy", "WriteFailed", "RunLock", "check_writable", "CheckpointMismatch", "InsufficientMemory", "PeakMemory",
    "available_memory", "check_memory", "check_dataset", "estimate_vars", "verdict_vars", "block_means", "cell_grid", "BLOCK_MCSE", "Verdict",
    "verdict", "cell_errors", "not_finite", "outcome", "check_result", "cell_detail", "claim_summary", "estimate_table", "dataset_config", "recorded_sha", "scalar", "one_pvalue",
    "TASK_FAILED", "settings_check", "rate_vars", "tune_malloc",
]
