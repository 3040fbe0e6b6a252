# The NumPy side of `frognano bench kernels`: times the same products as
# kernels/cpu/kbench on NumPy's own BLAS. It first prints one JSON line
# naming NumPy and its BLAS, then answers each request line from stdin
# ({"op", "m", "n", "k", "seconds"}) with one line {"gflops": ...}, so that
# frognano can time each shape right after NumPy does. Run only in the
# benchmark's throwaway virtual environment.
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info

rng = np.random.default_rng(1)
operands = {}


def product(op, m, n, k):
    key = (op, m, n, k)
    if key not in operands:
        if op == "NT":  # c[m,n] = a[m,k] . b[n,k]^T
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((n, k), dtype=np.float32).T
            c = np.empty((m, n), dtype=np.float32)
        elif op == "NN":  # c[m,n] = a[m,k] . b[k,n]
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            c = np.empty((m, n), dtype=np.float32)
        else:  # TN: c[n,k] = a[m,n]^T . b[m,k]
            a = rng.standard_normal((m, n), dtype=np.float32).T
            b = rng.standard_normal((m, k), dtype=np.float32)
            c = np.empty((n, k), dtype=np.float32)
        operands.clear()  # one shape's operands at a time
        operands[key] = (a, b, c)
    a, b, c = operands[key]
    return lambda: np.matmul(a, b, out=c)


print(json.dumps({"numpy": np.__version__, "threadpools": threadpool_info()}), flush=True)
for line in sys.stdin:
    s = json.loads(line)
    f = product(s["op"], s["m"], s["n"], s["k"])
    f()
    reps, t0 = 0, time.perf_counter()
    while True:
        f()
        reps += 1
        t = time.perf_counter() - t0
        if t >= s["seconds"] and reps >= 3:
            break
    gflops = 2.0 * s["m"] * s["n"] * s["k"] * reps / t / 1e9
    # OpenBLAS's pool threads spin for 2^28 cycles (about 0.1 s) after a
    # call before they sleep: let them, so that they do not compete with
    # frognano's timing of the same shape, which follows at once.
    time.sleep(0.3)
    print(json.dumps({"gflops": gflops}), flush=True)
