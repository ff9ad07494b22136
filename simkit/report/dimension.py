"""PDF report of the dimension study (``studies/dimension.py``; claim C6, confirmatory), from its dataset."""

from __future__ import annotations

__all__ = ["dimension_sections"]


def dimension_sections(doc, ds) -> None:
    doc.heading("Claim C6 (confirmatory)")
