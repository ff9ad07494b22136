"""``simkit.diagnose``: how many negatives InfoNCE needs on your embeddings (docs/diagnose.md).

``simkit.diagnose(embeddings, labels=..., tau=...)`` returns a :class:`Diagnosis`. The package
module is itself callable, so ``simkit.diagnose`` is the function whether or not a submodule has
been imported (importing a submodule binds the package to the attribute ``simkit.diagnose``).
"""

import sys as _sys
import types as _types

from simkit.diagnose.core import diagnose, negatives_for
from simkit.diagnose.result import Bias, Diagnosis, KNeeded

__all__ = ["diagnose", "Diagnosis", "KNeeded", "Bias", "negatives_for"]


class _CallableModule(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return diagnose(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
