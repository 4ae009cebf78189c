"""Raw graph buffers under AddressSanitizer and UndefinedBehaviorSanitizer (issue #16).

Builds tools/fuzz (asan_harness.c with GraphReader.h and the CPU engine's sources, see
CMakeLists.txt there), then feeds it the cases of ``tests/adversarial/fuzz_corpus.py`` (bit flips,
truncations, splices, word edits and field-level edits of the seed graphs) plus the crafted
regression buffers, in chunks, in parallel:

    python tools/fuzz/asan_fuzz.py --cases 100000 --jobs 2

A chunk whose harness run stops with a sanitizer report is split until the record that stops it is
found; that record is saved under ``--crash-dir`` with the report. The summary (records, crashes,
what the reader and the engine made of them, duration, compiler, flags, the command line) is
printed and written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
HERE = Path(__file__).resolve().parent

SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
}
MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "UndefinedBehaviorSanitizer")


class BuildError(RuntimeError):
    pass


def build(build_dir: Path, opt: str = "-O1") -> Path:
    """Configure and build the harness; BuildError with the tool output on failure."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake not found")
    cfg = [
        cmake,
        "-S",
        str(HERE),
        "-B",
        str(build_dir),
        f"-DHIPDNN_FUZZ_OPT={opt}",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if shutil.which("ninja"):
        cfg += ["-G", "Ninja"]
    for cmd in (cfg, [cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 1)]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return build_dir / "asan_harness"


def encode(buffers: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in buffers)


def run_harness(exe: Path, buffers: list[bytes], timeout: float = 600.0) -> tuple[int, dict[str, int], str]:
    """(exit status, counts, stderr) of one harness run over ``buffers``."""
    res = subprocess.run(
        [str(exe), "-"],
        input=encode(buffers),
        capture_output=True,
        env={**os.environ, **SANITIZER_ENV},
        timeout=timeout,
    )
    stderr = res.stderr.decode(errors="replace")
    counts: dict[str, int] = {}
    lines = res.stdout.decode(errors="replace").strip().splitlines()
    if res.returncode == 0 and lines:
        counts = json.loads(lines[-1])
    if res.returncode == 0 and any(m in stderr for m in MARKERS):
        return 1, counts, stderr  # a report that did not stop the run still counts
    return res.returncode, counts, stderr


def culprits(exe: Path, buffers: list[bytes]) -> list[tuple[int, str]]:
    """Indices (into ``buffers``) of records that stop the harness, by bisection, with the report."""
    status, _, report = run_harness(exe, buffers)
    if status == 0:
        return []
    if len(buffers) == 1:
        return [(0, report)]
    mid = len(buffers) // 2
    left = culprits(exe, buffers[:mid])
    right = [(i + mid, r) for i, r in culprits(exe, buffers[mid:])]
    # a failure only the whole chunk shows (state carried between records): report the chunk
    return left + right or [(-1, report)]


def make_chunk(args: tuple[int, int, int]) -> list[bytes]:
    from tests.adversarial.fuzz_corpus import make_case, seed_blobs

    seed, start, stop = args
    blobs = seed_blobs()
    return [make_case(seed, i, blobs)[1] for i in range(start, stop)]


def run_chunk(args: tuple[str, int, int, int]) -> dict[str, Any]:
    exe, seed, start, stop = args
    buffers = make_chunk((seed, start, stop))
    status, counts, report = run_harness(Path(exe), buffers)
    out: dict[str, Any] = {"start": start, "records": len(buffers), "counts": counts, "crashes": []}
    if status != 0:
        for idx, rep in culprits(Path(exe), buffers):
            case = f"{seed}:{start + idx}" if idx >= 0 else f"{seed}:{start}-{stop - 1}"
            blob = buffers[idx] if idx >= 0 else b""
            out["crashes"].append({"case": case, "status": status, "report": rep[-6000:], "hex": blob.hex()})
    return out


def compiler_version() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "unknown"
    return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--chunk", type=int, default=5000)
    ap.add_argument("--opt", default="-O1", help="optimization flag of the harness build")
    ap.add_argument("--build-dir", default=str(REPO / "build" / "fuzz"))
    ap.add_argument("--crash-dir", default=str(REPO / "build" / "fuzz" / "crashes"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "fuzz_asan.json"))
    args = ap.parse_args(argv)

    from tests.adversarial.fuzz_corpus import regression_blobs, seed_blobs

    t0 = time.monotonic()
    exe = build(Path(args.build_dir), args.opt)
    build_s = time.monotonic() - t0
    began = time.monotonic()
    # seeds and crafted regressions first, then the numbered cases
    fixed = list(seed_blobs().values()) + list(regression_blobs().values())
    status, counts_fixed, report = run_harness(exe, fixed)
    totals: Counter[str] = Counter(counts_fixed)
    crashes: list[dict[str, Any]] = []
    if status != 0:
        crashes.append({"case": "seeds+regressions", "status": status, "report": report[-6000:]})
    tasks = [(str(exe), args.seed, a, min(args.cases, a + args.chunk)) for a in range(0, args.cases, args.chunk)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for res in pool.map(run_chunk, tasks):
            totals.update(res["counts"])
            if not res["counts"]:  # the run stopped: its records still went through the harness
                totals["records"] += res["records"]
            crashes.extend(res["crashes"])
            print(f"{totals['records']:>8} records  {len(crashes)} crashes", flush=True)
    duration = time.monotonic() - began
    if crashes:
        crash_dir = Path(args.crash_dir)
        crash_dir.mkdir(parents=True, exist_ok=True)
        for c in crashes:
            name = c["case"].replace(":", "_")
            if c.get("hex"):
                (crash_dir / f"{name}.bin").write_bytes(bytes.fromhex(c["hex"]))
            (crash_dir / f"{name}.txt").write_text(c["report"])
    summary = {
        "what": "raw graph buffers through GraphReader.h and the CPU engine's reader, planner and "
        "kernels under ASan+UBSan (tools/fuzz/asan_fuzz.py)",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "seed": args.seed,
        "cases": args.cases + len(fixed),
        "records_through_harness": totals["records"],
        "crashes": len(crashes),
        "duration_s": round(duration, 1),
        "build_s": round(build_s, 1),
        "harness": {k: v for k, v in sorted(totals.items()) if k != "records"},
        "sanitizers": "-fsanitize=address,undefined -fno-sanitize-recover=all, detect_leaks=1",
        "opt": args.opt,
        "compiler": compiler_version(),
        "jobs": args.jobs,
        "crash_cases": [{k: v for k, v in c.items() if k != "hex"} for c in crashes[:20]],
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, {platform.platform()}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("cases", "records_through_harness", "crashes", "duration_s")}))
    print("harness:", json.dumps(summary["harness"]))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
