"""PDF reports, read from a saved dataset alone (never from a re-run).

:mod:`simkit.report.document` holds the page machinery — :class:`ReportDocument`, :func:`format_pm`,
:func:`provenance_pages`, :func:`write_report`, :func:`study_report`; :mod:`simkit.report.spec` the
declarative vocabulary a study's report is written in (:class:`Panel`, :class:`FigurePage`,
:class:`Table`, :class:`ClaimTable`, :class:`TitlePage`, :class:`Failures`, :class:`Text`) and its
renderer :func:`render`; one module per study holds that study's declarations
(``simkit.report.rate_k``, …).
"""

from __future__ import annotations

from simkit.report.document import (ReportDocument, format_pm, provenance_pages, study_report, wrap_text,
                                    write_report)
from simkit.report.spec import ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, render

__all__ = ["ReportDocument", "format_pm", "wrap_text", "provenance_pages", "write_report", "study_report",
           "Panel", "FigurePage", "Table", "ClaimTable", "TitlePage", "Failures", "Text", "render"]
