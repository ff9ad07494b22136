"""The progress bar's compile note (simkit.runner._compiling): shown during a Numba compile in
this process, cleared after it, and gone once closed."""

from __future__ import annotations

from numba import njit

from simkit.runner._compiling import MESSAGE, CompileNote


class _Bar:
    """Records what would be shown after a tqdm bar."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.shown.append(s)


def _fresh_function(c: float):
    @njit  # a new dispatcher, no cache: its first call compiles
    def f(x):
        return x * c + 1.0
    return f


def test_note_shown_during_compile_and_cleared_after():
    bar = _Bar()
    note = CompileNote(bar)
    try:
        f = _fresh_function(2.0)
        assert f(1.0) == 3.0
        assert bar.shown == [MESSAGE, ""]  # once for the outermost compile, then cleared
        f(2.0)  # compiled already: nothing more
        assert bar.shown == [MESSAGE, ""]
    finally:
        note.close()


def test_no_note_after_close_or_without_bar():
    bar = _Bar()
    note = CompileNote(bar)
    note.close()
    _fresh_function(3.0)(1.0)
    assert bar.shown == []  # positive control of the first test: no listener, no note
    CompileNote(None).close()  # progress off: a no-op
