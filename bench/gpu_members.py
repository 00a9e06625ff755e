"""GPU members on a real GPU: a sweep whose members each need one GPU and run a CUDA
computation, beside CPU members filling the node's other cores (issue 23, on the `device`
machine: one NVIDIA GPU, 16 cores; needs PyTorch with CUDA there).

    python bench/gpu_members.py [--members 8] [--size 8192] [--reps 20] [--cpu-members 64]

One `pwe run` of two nodes on the local host:
  gpu   MEMBERS members, `gpusPerMember: 1`: each multiplies two SIZE x SIZE bf16 matrices
        REPS times on the GPU it was given, checks a 64 x 64 block of the product against
        float64 on the CPU, and returns its device, CUDA_VISIBLE_DEVICES, TFLOP/s and the
        block's largest relative error as outputs ($PWE_OUTPUTS);
  cpu   CPU-MEMBERS members of `sleep 0.2`, one core each, run at the same time.
Checked from the run itself (exit status 2 if any fails): every member done once; each GPU
member saw exactly one device, the one pwe gave it (CUDA_VISIBLE_DEVICES); no two GPU
members ran at once on a one-GPU machine (their spans from the pilot's events); the
block's error within bf16's bound. Printed: wall time, the GPU members' spans and TFLOP/s,
how many CPU members ran while a GPU member did.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import clock, parser, pilot_events, pwe_env

MEMBER = r'''
import os, sys, time
import torch
size, reps, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assert torch.cuda.is_available(), "no CUDA device visible"
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(seed)
a = torch.randn(size, size, device=dev, dtype=torch.bfloat16, generator=g)
b = torch.randn(size, size, device=dev, dtype=torch.bfloat16, generator=g)
c = a @ b  # warm-up (cuBLAS picks its kernel)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(reps):
    c = a @ b
torch.cuda.synchronize()
dt = time.perf_counter() - t0
ref = a[:64].double().cpu() @ b[:, :64].double().cpu()
err = ((c[:64, :64].double().cpu() - ref).abs().max() / ref.abs().max()).item()
with open(os.environ["PWE_OUTPUTS"], "a") as out:
    out.write(f"device={torch.cuda.get_device_name(0).replace(' ', '_')}\n")
    out.write(f"count={torch.cuda.device_count()}\n")
    out.write(f"visible={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}\n")
    out.write(f"tflops={reps * 2 * size ** 3 / dt / 1e12:.1f}\n")
    out.write(f"err={err:.2e}\n")
'''


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu-members", type=int, default=64)
    ap.add_argument("--host", default="local", help="the GPU host (default: this machine)")
    args = ap.parse_args()
    env = pwe_env()
    with tempfile.TemporaryDirectory(prefix="pwe-gpu-") as tmp:
        base = Path(tmp)
        (base / "member.py").write_text(MEMBER)
        (base / "gpu.yaml").write_text(f"""\
name: gpu-members
properties: {{script: {base / 'member.py'}, python: {sys.executable}}}
nodes:
  gpu:
    parameters: {{seed: {{range: [0, {args.members}]}}}}
    run: "{{{{ python }}}} {{{{ script }}}} {args.size} {args.reps} {{{{ seed }}}}"
    scheduling: {{gpusPerMember: 1}}
  cpu:
    parameters: {{k: {{range: [0, {args.cpu_members}]}}}}
    run: sleep 0.2
""")
        run_dir = base / "run"
        t0 = clock()
        proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(base / "gpu.yaml"), "--run-dir", str(run_dir),
                               "--host", args.host],
                              env=env, cwd=base, capture_output=True, text=True)
        wall = clock() - t0
        print(f"pwe run: exit {proc.returncode} in {wall:.2f} s; {proc.stderr.strip().splitlines()[-1]}")
        if not run_dir.is_dir():
            sys.exit(2)
        shown = subprocess.run([sys.executable, "-m", "pwe", "show", str(run_dir), "--json", "--limit", "0"],
                               env=env, capture_output=True, text=True)
        hosts = subprocess.run([sys.executable, "-m", "pwe", "hosts", "show", args.host, "--json"], env=env,
                               capture_output=True, text=True)
        gpus = json.loads(hosts.stdout).get("gpus_per_node") if hosts.returncode == 0 else None
        print(f"pwe hosts show {args.host}: gpus_per_node={gpus}, cores_per_node="
              f"{json.loads(hosts.stdout).get('cores_per_node') if hosts.returncode == 0 else '?'}")
        doc = json.loads(shown.stdout)
        members = doc["members"] if isinstance(doc, dict) else doc
        ev = pilot_events(run_dir)
        spans: dict[tuple[str, int], list[float]] = {}
        for e in ev:
            if e["k"] in ("start", "end"):
                spans.setdefault((e["n"], e["m"]), []).append(e["t"])
        problems = []
        if proc.returncode != 0:
            problems.append(f"pwe run exit {proc.returncode}: {proc.stderr[-400:]}")
        gpu_rows = [m for m in members if m["node"] == "gpu"]
        for m in gpu_rows:
            out = m.get("outputs") or {}
            print(f"  gpu[{m['member']}] {m['state']} attempts={m.get('attempts')} visible={out.get('visible')} "
                  f"count={out.get('count')} {out.get('device')} {out.get('tflops')} TFLOP/s err={out.get('err')}")
            if m["state"] != "done" or m.get("attempts") != 1:
                problems.append(f"gpu[{m['member']}] {m['state']}, attempts {m.get('attempts')}")
            if out.get("count") != "1" or out.get("visible") in (None, "unset"):
                problems.append(f"gpu[{m['member']}] saw {out.get('count')} devices, CUDA_VISIBLE_DEVICES "
                                f"{out.get('visible')}")
            if out.get("err") is not None and float(out["err"]) > 2e-2:
                problems.append(f"gpu[{m['member']}] product off by {out['err']}")
        cpu_done = sum(1 for m in members if m["node"] == "cpu" and m["state"] == "done")
        if cpu_done != args.cpu_members or len(gpu_rows) != args.members:
            problems.append(f"cpu members done {cpu_done} of {args.cpu_members}; gpu members {len(gpu_rows)}")
        gspans = sorted(tuple(v) for (n, _), v in spans.items() if n == "gpu" and len(v) == 2)
        overlap = sum(1 for a, b in zip(gspans, gspans[1:]) if b[0] < a[1])
        if gpus == 1 and overlap:
            problems.append(f"{overlap} GPU members started before the one before them ended (one GPU)")
        durations = [b - a for a, b in gspans]
        cpu_during = sum(1 for (n, _), v in spans.items() if n == "cpu" and len(v) == 2
                         and any(v[0] < g1 and v[1] > g0 for g0, g1 in gspans))
        tflops = [float((m.get("outputs") or {}).get("tflops", "nan")) for m in gpu_rows]
        if durations:
            print(f"GPU members: {len(durations)}, span median {statistics.median(durations):.2f} s "
                  f"(min {min(durations):.2f}, max {max(durations):.2f}); overlapping pairs {overlap}; "
                  f"TFLOP/s median {statistics.median(tflops):.0f}")
        print(f"CPU members done {cpu_done}; {cpu_during} of them ran while a GPU member ran")
        for p in problems:
            print("PROBLEM:", p)
        sys.exit(2 if problems else 0)


if __name__ == "__main__":
    main()
