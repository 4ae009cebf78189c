"""The long form of the deserialize fuzzing (issue #16): a million or more cases through
``Graph.deserialize -> build -> execute``, the backend descriptors and the CPU engine's ABI entries,
with guard-banded buffers (the oracle of ``tests/adversarial/fuzz_corpus.py``).

    python tools/fuzz/long_fuzz.py --cases 1000000 --workers 2
    python tools/fuzz/long_fuzz.py --resume               # continue an interrupted run
    python tools/fuzz/long_fuzz.py --replay 1:123456      # one case, in this process, with a traceback

Cases are numbered; case ``i`` of seed ``s`` is always the same bytes, so a run is split into
chunks handed to worker processes, and a worker that dies (a crash) or stops making progress (a
hang) costs only the case it was on: it is recorded with its number, and a fresh worker takes the
rest of the chunk. Progress is saved after every chunk (``--state``) so an interrupted run resumes.
The summary (cases, crashes, hangs, forbidden outcomes, outcomes by stage and by error code,
duration, the command line) is printed and written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

HANDLE_CASES = 20_000  # a fresh handle this often: plan caches and contexts stay bounded
MAX_RECORDED = 50  # failures kept in full in the summary


def _worker(
    wid: int, seed: int, tasks: Any, results: Any, progress: Any, starts: Any
) -> None:  # pragma: no cover - runs in a child process
    import hipdnn
    from tests.adversarial.fuzz_corpus import FuzzFailure, Oracle, Tally, make_case, seed_blobs

    blobs = seed_blobs()
    handle = hipdnn.Handle()
    oracle = Oracle(handle)
    done_on_handle = 0
    parent = os.getppid()
    while True:
        try:
            task = tasks.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent:  # the parent is gone: nobody collects results
                break
            continue
        if task is None:
            break
        chunk, start, stop = task
        starts[wid] = start
        tally = Tally()
        failures: list[dict[str, Any]] = []
        for i in range(start, stop):
            progress[wid] = i
            label, blob = make_case(seed, i, blobs)
            try:
                oracle.run(blob, tally)
            except FuzzFailure as exc:
                failures.append({"case": f"{seed}:{i}", "label": label, "error": str(exc)[:2000], "hex": blob.hex()})
            done_on_handle += 1
            if done_on_handle >= HANDLE_CASES:
                handle.close()
                handle = hipdnn.Handle()
                oracle = Oracle(handle)
                done_on_handle = 0
        progress[wid] = -1
        results.put((wid, chunk, start, stop, tally.cases, dict(tally.outcomes), failures))
    handle.close()


def error_codes(outcomes: dict[str, int]) -> dict[str, int]:
    """Outcome counts summed over stages, errors only (``frontend:INVALID_VALUE`` -> ``INVALID_VALUE``)."""
    out: Counter[str] = Counter()
    for key, n in outcomes.items():
        code = key.split(":", 1)[1]
        if code.isupper() or code.startswith(("backend.", "plugin.")):
            out[code] += n
    return dict(sorted(out.items()))


class Run:
    """The parent: hands out chunks, watches workers, keeps the state file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state_path = Path(args.state)
        self.state: dict[str, Any] = {
            "seed": args.seed,
            "cases_requested": args.cases,
            "chunk": args.chunk,
            "done_chunks": [],
            "cases": 0,
            "outcomes": {},
            "failures": [],
            "crashes": [],
            "hangs": [],
            "elapsed_s": 0.0,
        }
        if args.resume and self.state_path.exists():
            self.state = json.loads(self.state_path.read_text())
            args.seed, args.cases, args.chunk = self.state["seed"], self.state["cases_requested"], self.state["chunk"]
        # every invocation that worked on this run, the first one and each --resume
        self.state.setdefault("commands", []).append(" ".join([Path(sys.executable).name, *sys.argv]))

    def save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.state_path)

    def run(self) -> dict[str, Any]:
        args = self.args
        ctx = mp.get_context("spawn")
        done = set(self.state["done_chunks"])
        chunks = [
            (c, c * args.chunk, min(args.cases, (c + 1) * args.chunk))
            for c in range((args.cases + args.chunk - 1) // args.chunk)
            if c not in done
        ]
        tasks, results = ctx.Queue(), ctx.Queue()
        for task in chunks:
            tasks.put(task)
        # per worker: the case it is on (-1 between cases) and where its current task began
        progress = ctx.Array("q", [-1] * args.workers, lock=False)
        starts = ctx.Array("q", [-1] * args.workers, lock=False)
        workers: dict[int, Any] = {}
        last_seen: dict[int, tuple[int, float]] = {}
        # A chunk's results are kept aside until all its cases are accounted for, then merged and
        # saved: an interrupted run resumes at a chunk boundary with exact counts.
        partial = {c: {"remaining": b - a, "cases": 0, "outcomes": Counter(), "failures": []} for c, a, b in chunks}

        def start(wid: int) -> None:
            progress[wid] = -1
            starts[wid] = -1
            p = ctx.Process(target=_worker, args=(wid, args.seed, tasks, results, progress, starts), daemon=True)
            p.start()
            workers[wid] = p
            last_seen[wid] = (-1, time.monotonic())

        def account(chunk: int, cases: int, outcomes: dict[str, int], failures: list[dict[str, Any]]) -> None:
            part = partial[chunk]
            part["remaining"] -= cases
            part["cases"] += cases
            part["outcomes"].update(outcomes)
            part["failures"].extend(failures)
            if part["remaining"] > 0:
                return
            del partial[chunk]
            self.state["cases"] += part["cases"]
            merged = Counter(self.state["outcomes"])
            merged.update(part["outcomes"])
            self.state["outcomes"] = dict(merged)
            self.state["failures"].extend(part["failures"])
            self.state["done_chunks"].append(chunk)
            self.state["elapsed_s"] = base_elapsed + time.monotonic() - began
            self.save()
            n = self.state["cases"]
            print(
                f"{n:>9} cases  {len(self.state['failures'])} forbidden  {len(self.state['crashes'])} crashes  "
                f"{len(self.state['hangs'])} hangs  {n / max(self.state['elapsed_s'], 1e-9):.0f} cases/s",
                flush=True,
            )

        began = time.monotonic()
        base_elapsed = float(self.state["elapsed_s"])
        for wid in range(args.workers):
            start(wid)
        try:
            self._loop(partial, workers, last_seen, progress, starts, tasks, results, start, account)
        finally:
            for p in workers.values():
                if p.is_alive():
                    p.kill()
                p.join(timeout=30)
        return self.summary()

    def _loop(
        self,
        partial: dict[int, Any],
        workers: dict[int, Any],
        last_seen: dict[int, tuple[int, float]],
        progress: Any,
        starts: Any,
        tasks: Any,
        results: Any,
        start: Any,
        account: Any,
    ) -> None:
        args = self.args
        while partial:
            try:
                _, chunk, _, _, cases, outcomes, failures = results.get(timeout=1.0)
            except queue.Empty:
                pass
            else:
                account(chunk, cases, outcomes, failures)
            # watch every worker: a dead one crashed on its current case, a stuck one hangs on it
            now = time.monotonic()
            for w, p in list(workers.items()):
                current = int(progress[w])
                if current != last_seen[w][0]:
                    last_seen[w] = (current, now)
                dead = not p.is_alive()
                stuck = current >= 0 and now - last_seen[w][1] > args.hang_timeout
                if not dead and not stuck:
                    continue
                if stuck:
                    p.kill()
                    p.join()
                if current >= 0:
                    kind = "hangs" if stuck else "crashes"
                    self.state[kind].append({"case": f"{args.seed}:{current}", "exitcode": p.exitcode})
                    chunk = current // args.chunk
                    stop_i = min(args.cases, (chunk + 1) * args.chunk)
                    begun = int(starts[w])
                    # the cases before it run again (their results died with the worker), the rest follow
                    if begun < current:
                        tasks.put((chunk, begun, current))
                    if current + 1 < stop_i:
                        tasks.put((chunk, current + 1, stop_i))
                    account(chunk, 1, {}, [])
                    self.save()
                elif dead and partial:
                    print(f"worker {w} exited with {p.exitcode} between cases", flush=True)
                start(w)
        for _ in workers:
            tasks.put(None)

    def summary(self) -> dict[str, Any]:
        s = self.state
        return {
            "what": "deserialize/build/execute fuzzing of graph buffers (tools/fuzz/long_fuzz.py)",
            "commands": s["commands"],
            "seed": s["seed"],
            "cases": s["cases"],
            "crashes": len(s["crashes"]),
            "hangs": len(s["hangs"]),
            "forbidden_outcomes": len(s["failures"]),
            "duration_s": round(s["elapsed_s"], 1),
            "cases_per_s": round(s["cases"] / max(s["elapsed_s"], 1e-9), 1),
            "workers": self.args.workers,
            "errors_by_code": error_codes(s["outcomes"]),
            "outcomes_by_stage": dict(sorted(s["outcomes"].items())),
            "crash_cases": s["crashes"][:MAX_RECORDED],
            "hang_cases": s["hangs"][:MAX_RECORDED],
            "failure_cases": s["failures"][:MAX_RECORDED],
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus, {platform.platform()}",
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }


def replay(spec: str) -> int:
    import hipdnn
    from tests.adversarial.fuzz_corpus import Oracle, Tally, make_case, seed_blobs

    seed, index = (int(x) for x in spec.split(":"))
    label, blob = make_case(seed, index, seed_blobs())
    print(f"case {spec}: {label}, {len(blob)} bytes\n{blob.hex()}")
    with hipdnn.Handle() as handle:
        tally = Tally()
        try:
            Oracle(handle).run(blob, tally)
        except Exception:
            traceback.print_exc()
            return 1
        print(dict(tally.outcomes))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--chunk", type=int, default=5000, help="cases per task handed to a worker")
    ap.add_argument("--hang-timeout", type=float, default=120.0, help="seconds without progress before a kill")
    ap.add_argument("--state", default=str(REPO / "build" / "fuzz" / "long_fuzz.state.json"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "fuzz_long.json"))
    ap.add_argument("--resume", action="store_true", help="continue the run recorded in --state")
    ap.add_argument("--replay", metavar="SEED:INDEX", help="run one case here and show what happens")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    # SIGTERM ends the run like ^C: workers are stopped, finished chunks stay in --state
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    summary = Run(args).run()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    brief = {k: summary[k] for k in ("cases", "crashes", "hangs", "forbidden_outcomes", "duration_s", "cases_per_s")}
    print(json.dumps(brief), "\nerrors by code:", json.dumps(summary["errors_by_code"]))
    bad = summary["crashes"] + summary["hangs"] + summary["forbidden_outcomes"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
