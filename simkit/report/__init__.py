"""PDF reports, read from a saved dataset alone: the page machinery (:mod:`simkit.report.document`), the
declarative vocabulary (:mod:`simkit.report.spec`), one module of declarations per study and its prose
in ``pages/<study>.md``."""

from __future__ import annotations

from simkit.report.document import (ReportDocument, format_pm, provenance_pages, study_report, wrap_text,
                                    write_report)
from simkit.report.spec import ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, prose, render

__all__ = ["ReportDocument", "format_pm", "wrap_text", "provenance_pages", "write_report", "study_report",
           "Panel", "FigurePage", "Table", "ClaimTable", "TitlePage", "Failures", "Text", "render", "prose"]
