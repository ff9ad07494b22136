"""The claims C1–C7 as checks: pre-registered protocols (:mod:`simkit.claims.protocol`), the claim table
of ``simkit validate`` (:mod:`simkit.claims.validate`) and the calibration of every check's
false-failure rate over many seeds (:mod:`simkit.claims.calibrate`).

Nothing is imported here: the runner reads :mod:`simkit.claims.protocol`, and the other two modules
use the runner.
"""
