"""The README's claims-at-a-glance table, generated from a validation dataset (``data/claims.nc``).

``python -m simkit.claims.table data/claims.nc`` prints the markdown table; README.md holds it
between the marker comments :data:`START` and :data:`END`, and a test checks that the two agree.
One line per row of the dataset (exploratory, confirmatory and diagnostic rows apart), each cell
at most :data:`MAX_CELL` characters; the details are in the validation report.
"""

from __future__ import annotations

import sys

import numpy as np
import xarray as xr

from simkit.claims.protocol import label_protocol

__all__ = ["START", "END", "MAX_CELL", "claims_table", "readme_table", "main"]

START = "<!-- claims-table:start (generated: python -m simkit.claims.table data/claims.nc) -->"
END = "<!-- claims-table:end -->"
#: longest cell of the table, in characters
MAX_CELL = 300


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1].rstrip() + "…"


def claims_table(ds: xr.Dataset) -> str:
    """The markdown table of a validation dataset: claim row, what is claimed, the row's statistic in
    one line (estimates ± MCSE), its stated false-failure rate (and, where the row's checks were calibrated
    at the design that ran, the calibrated rate with its Clopper-Pearson 95% interval), verdict and the
    studies' reports."""
    lines = ["| claim | what is claimed | statistic ± MCSE (per check) | false-fail rate | verdict | report |",
             "|---|---|---|---|---|---|"]
    for i, c in enumerate(ds["claim"].values):
        protocol = label_protocol(str(ds["analysis"].values[i]))
        label = str(c) + (f" ({protocol[0]})" if protocol else "")
        f = float(ds["false_fail_rate"].values[i])
        rate = f"{f:.2g}" if f == f else "—"
        e, lo, hi = (float(ds[f"empirical_false_fail{k}"].values[i]) if f"empirical_false_fail{k}" in ds else np.nan
                     for k in ("", "_low", "_high"))
        if e == e:  # a calibration at the design that ran (simkit validate's rule)
            rate += f"; calibrated {e:.2g} [{lo:.2g}, {hi:.2g}]"
        v = str(ds["verdict"].values[i])
        n_na = int(ds["n_not_assessed"].values[i]) if "n_not_assessed" in ds else 0
        verdict = f"**{v}**" + (f" ({n_na} check{'s' if n_na > 1 else ''} not assessed)" if n_na and v != "not assessed"
                                 else "")
        studies = [s.strip() for s in str(ds["studies"].values[i]).split(",") if s.strip()]
        report = ", ".join(f"[{s}](reports/{s}.pdf)" for s in studies) or "—"
        lines.append("| " + " | ".join(_cell(x) for x in (
            label, str(ds["claim_text"].values[i]), str(ds["statistic"].values[i]) or "—",
            rate, verdict, report)) + " |")
    return "\n".join(lines)


def readme_table(readme: str) -> str:
    """The text between :data:`START` and :data:`END` of a README (ValueError without both markers)."""
    if START not in readme or END not in readme:
        raise ValueError("README must hold the claims-table markers")
    return readme.split(START, 1)[1].split(END, 1)[0].strip("\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("simkit: error: usage: python -m simkit.claims.table PATH.nc", file=sys.stderr)
        return 2
    from simkit.runner import read_dataset
    try:
        ds = read_dataset(args[0])
    except (OSError, ValueError) as exc:
        print(f"simkit: error: cannot read {args[0]!r}: {exc}", file=sys.stderr)
        return 2
    print(claims_table(ds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
