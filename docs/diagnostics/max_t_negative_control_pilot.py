"""Offline pilot of the max-t curve test against the negative control of tests/test_negative_control.py
(uniform-d3, 32 blocks of 256 anchors, k <= 1024): m1 or Z2 x 1.05 inside the control variates, 200 re-runs
each at seeds [888, s] (blocks) and [889, s] (bootstrap), which no test uses; Hotelling F beside it.

    python docs/diagnostics/max_t_negative_control_pilot.py N_RERUNS     (results: max_t_negative_control_pilot.json)
"""

import sys, json, numpy as np

from simkit.exact.curve import gap_curve
from simkit.estimators.infonce import GapEstimator
from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform
from simkit.stats.truth_tests import max_t_test, curve_test
PI, KERNEL, TAU = Uniform(3), VMFKernel(10.0), 0.1
K_MAX, N_BLOCKS, N_ANCHORS = 1024, 32, 256
R = int(sys.argv[1])
ex = gap_curve(PI, KERNEL, TAU, 1 << np.arange(11)).gap
out = {}
for name, cs in (("none", None), ("m1", {"m1": 1.05}), ("Z2", {"Z2": 1.05})):
    est = GapEstimator(PI, KERNEL, TAU, K_MAX, constant_scale=cs)
    pm, pf = [], []
    for s in range(R):
        rng = np.random.default_rng([888, s])
        b = np.array([est.block(N_ANCHORS, rng)["gap_cv"] for _ in range(N_BLOCKS)])
        pm.append(max_t_test(b, ex, rng=np.random.default_rng([889, s])).p_value); pf.append(curve_test(b, ex).p_value)
    pm, pf = np.array(pm), np.array(pf)
    out[name] = {"maxt_reject_1e-3": int(np.sum(pm < 1e-3)), "F_reject_1e-3": int(np.sum(pf < 1e-3)), "R": R,
                 "maxt_p_max": float(pm.max()), "maxt_p_median": float(np.median(pm))}
print(json.dumps(out))
