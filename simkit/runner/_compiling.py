"""The progress bar's note while Numba compiles: a first run (empty cache) spends most of its
time there with no task finished, which looked like a hang."""

from __future__ import annotations

#: shown after the bar while a jitted function compiles in this process
MESSAGE = "compiling, once: cached for later runs"


class CompileNote:
    """Show :data:`MESSAGE` on ``bar`` (a tqdm bar, or None: nothing) during each outermost
    ``numba:compile`` event of this process, until :meth:`close`. Compiles in other processes (Dask
    workers) are not seen; loads from Numba's on-disk cache are not compiles and show nothing."""

    def __init__(self, bar) -> None:
        self.bar = bar
        self.depth = 0
        self.listener = None
        if bar is None:
            return
        from numba.core import event as ev

        note = self

        class _Listener(ev.Listener):
            def on_start(self, event):
                note.depth += 1
                if note.depth == 1:
                    note.bar.set_postfix_str(MESSAGE)

            def on_end(self, event):
                note.depth -= 1
                if note.depth == 0:
                    note.bar.set_postfix_str("")

        self.listener = _Listener()
        ev.register("numba:compile", self.listener)

    def close(self) -> None:
        if self.listener is not None:
            from numba.core import event as ev
            ev.unregister("numba:compile", self.listener)
            self.listener = None
