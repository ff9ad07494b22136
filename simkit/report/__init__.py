"""PDF reports, read from a saved dataset alone (never from a re-run).

:mod:`simkit.report.document` holds the generic pieces — :class:`ReportDocument`, :func:`format_pm`,
:func:`provenance_pages`, :func:`write_report`, :func:`study_report` and the plotting helpers —
and one module per study holds that study's pages (``simkit.report.rate_k``, …).
"""

from __future__ import annotations

from simkit.report.document import (ReportDocument, format_pm, provenance_pages, study_report, wrap_text,
                                    write_report)

__all__ = ["ReportDocument", "format_pm", "wrap_text", "provenance_pages", "write_report", "study_report"]
