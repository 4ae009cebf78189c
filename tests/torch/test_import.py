"""hipdnn without torch: the package imports, hipdnn.torch says how to get torch."""

from __future__ import annotations

import subprocess
import sys


def test_hipdnn_imports_without_torch_and_hipdnn_torch_says_what_to_install() -> None:
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import hipdnn\n"
        "assert 'hipdnn.torch' not in sys.modules\n"
        "try:\n"
        "    import hipdnn.torch\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'pip install "hipdnn[torch]"' in out.stdout
