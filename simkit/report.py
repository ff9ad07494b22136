"""PDF reports, read from a saved dataset alone (placeholder being replaced)."""
from __future__ import annotations

from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

from simkit.engine import _atomic_write_bytes  # noqa: E402


def rate_k_report(ds, path):
    path = Path(path)

    def write(tmp):
        with PdfPages(tmp) as pdf:
            fig, ax = plt.subplots()
            for i, s in enumerate(ds["setting"].values):
                ax.loglog(ds["k"], ds["gap"][i], "o-", label=str(s))
            ax.legend()
            pdf.savefig(fig)
            plt.close(fig)

    _atomic_write_bytes(path, write, ".pdf")
