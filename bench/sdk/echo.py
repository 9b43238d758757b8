"""Times `echo hi` run N times in sandbox NAME through the Python SDK,
printing each round trip in nanoseconds (bench -driver interfaces)."""

import sys
import time

from corral import Sandbox

sb = Sandbox.connect(sys.argv[1])
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter_ns()
    r = sb.exec(["echo", "hi"])
    took = time.perf_counter_ns() - t0
    if r.stdout != "hi\n" or r.exit_code != 0:
        sys.exit(f"exec returned {r}")
    print(took, flush=True)
