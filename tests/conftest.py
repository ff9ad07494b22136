"""Suite-wide hooks: the false-failure register (HOUSE.md, "one suite-wide budget").

Every statistical test carries ``@pytest.mark.false_fail(rate, reason=...)`` beside its threshold,
or ``@pytest.mark.deterministic(reason=...)`` when it draws random numbers but cannot fail by chance;
``tests/test_budget.py`` sums the rates of the collected items against the README's budget.

``PENDING`` held the markers of test files whose owners had them open when the register was
introduced; they are now on the tests themselves and the register is empty. It stays as the place for
a marker that cannot yet go on its test (``tests/test_budget.py`` fails if a test carries both).

``--false-fail-report PATH`` writes the register of the collected items as JSON; ``test_budget``
uses it to see the whole default suite when it runs in a partial session.
"""

from __future__ import annotations

import json

import pytest

from _false_fail import row


# "file::test function" -> markers, applied at collection (see the module docstring). Empty: every entry
# of the register's first version now sits on its test as a decorator.
PENDING: dict[str, list[pytest.MarkDecorator]] = {}


def pytest_addoption(parser):
    parser.addoption("--false-fail-report", metavar="PATH", default=None,
                     help="write the false_fail / deterministic markers of the collected items as JSON")


def pytest_collection_modifyitems(config, items):
    for item in items:
        key = f"{item.path.name}::{item.originalname if hasattr(item, 'originalname') else item.name}"
        for mark in PENDING.get(key, ()):
            item.add_marker(mark)


def pytest_collection_finish(session):
    path = session.config.getoption("--false-fail-report")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump([row(item) for item in session.items], fh, default=repr)
