"""A/B of the compiled execute core's host time (issue #26): bench/serving.py's host_overhead, with
the core loaded from the .so given as the first argument (e.g. one built from an older commit), so two
cores are compared with the same Python front end on the same machine.

    python bench/execute_core_ab.py PATH/_execute_core*.so [CALLS]

Prints one JSON object (microseconds per call). bench/results/execute_core_ab.json holds a run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def main() -> int:
    spec = importlib.util.spec_from_file_location("hipdnn.backend._execute_core", sys.argv[1])
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {sys.argv[1]}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hipdnn.backend._execute_core"] = module  # before hipdnn imports it
    spec.loader.exec_module(module)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import serving

    print(json.dumps(serving.host_overhead(int(sys.argv[2]) if len(sys.argv) > 2 else 20000)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
