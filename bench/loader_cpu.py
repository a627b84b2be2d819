"""CPU time per image of bench/bench_loader.py's gdsio pipeline, for before/after comparisons of one change.

    python -P bench/loader_cpu.py TREE FOLDER gdsio|gdsio-whole

runs TREE/bench/bench_loader.py's gdsio pipeline (crop decode on, or whole-image decode) on the
ImageFolder FOLDER with the gdsio installed in this interpreter: one warm-up pass, then 3 timed
passes. Prints one JSON line: process CPU time (every thread) per image, wall images/s, and the
decode backends that ran. CPU time moves less than wall time with the load of other jobs.
"""

import json
import sys
import time

tree, root, mode = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, tree + "/bench")
import torch  # noqa: E402

import bench_loader as B  # noqa: E402

p = B.gdsio_pipeline(root, "cpu", 64, torch.float32, crop_decode=(mode == "gdsio"))
p()  # warm-up pass
w0, c0 = time.perf_counter(), time.process_time()
n = sum(p() for _ in range(3))
w, c = time.perf_counter() - w0, time.process_time() - c0
print(json.dumps({"mode": mode, "images": n, "wall_s": w, "cpu_s": c, "cpu_ms_per_image": 1e3 * c / n,
                  "images_per_s": n / w, "decode": p.loader.stats().decode_backends}))
