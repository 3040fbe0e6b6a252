# The NumPy side of `frognano bench kernels`: times the same products as
# kernels/cpu/kbench on NumPy's own BLAS and prints them as JSON. Run only in
# the benchmark's throwaway virtual environment.
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info

spec = json.load(sys.stdin)
rng = np.random.default_rng(1)
out = []
for s in spec["shapes"]:
    op, m, n, k = s["op"], s["m"], s["n"], s["k"]
    if op == "NT":  # c[m,n] = a[m,k] . b[n,k]^T
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((n, k), dtype=np.float32)
        f = lambda: np.matmul(a, b.T, out=c)
        c = np.empty((m, n), dtype=np.float32)
    elif op == "NN":  # c[m,n] = a[m,k] . b[k,n]
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), dtype=np.float32)
        f = lambda: np.matmul(a, b, out=c)
    else:  # TN: c[n,k] = a[m,n]^T . b[m,k]
        a = rng.standard_normal((m, n), dtype=np.float32)
        b = rng.standard_normal((m, k), dtype=np.float32)
        c = np.empty((n, k), dtype=np.float32)
        f = lambda: np.matmul(a.T, b, out=c)
    f()
    reps, t0 = 0, time.perf_counter()
    while True:
        f()
        reps += 1
        t = time.perf_counter() - t0
        if t >= spec["seconds"] and reps >= 3:
            break
    out.append({"op": op, "m": m, "n": n, "k": k, "gflops": 2.0 * m * n * k * reps / t / 1e9})
print(json.dumps({"numpy": np.__version__, "threadpools": threadpool_info(), "results": out}))
