"""Give a repaired hipdnn wheel's bundled GNU OpenMP runtime back its own soname, libgomp.so.1.

    python tools/wheel_openmp.py WHEEL [--patchelf PATH]

``auditwheel repair`` copies libgomp into ``hipdnn.libs/`` under a name of its own
(``libgomp-<hash>.so.1.0.0``) and points the CPU engine at that name. In a process that already runs
on GNU OpenMP (PyTorch's Linux wheels ship ``libgomp.so.1``) the engine would then bring a second
OpenMP runtime: a second team of threads fighting the first for the cores, and hipdnn.torch could not
hand attention to torch's own threads (``hipdnn/torch/plans.py``, ``torch_shares_engine_openmp``). So,
as torch's wheel does, the bundled copy is named and tagged ``libgomp.so.1`` again and the engine
needs ``libgomp.so.1``: the dynamic loader binds it to a ``libgomp.so.1`` the process has already
loaded (torch's, the system's), and otherwise finds the bundled copy through the engine's RUNPATH.
(The engine needs symbol versions up to GOMP_4.5, GCC 6 and later.) The wheel is rewritten in place,
its RECORD updated; a wheel without a bundled libgomp is left alone.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SONAME = "libgomp.so.1"
BUNDLED = re.compile(r"^[^/]+\.libs/libgomp-[0-9a-f]+\.so[.0-9]*$")


def record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def patchelf(tool: str, *args: str) -> str:
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--patchelf", default=shutil.which("patchelf") or "patchelf")
    args = ap.parse_args()
    with zipfile.ZipFile(args.wheel) as zf:
        infos = zf.infolist()
        files = {i.filename: zf.read(i) for i in infos}
    bundled = [n for n in files if BUNDLED.match(n)]
    if not bundled:
        print(f"wheel_openmp: {args.wheel.name} bundles no libgomp; left alone")
        return 0
    if len(bundled) != 1:
        print(f"wheel_openmp: more than one bundled libgomp in {args.wheel.name}: {bundled}", file=sys.stderr)
        return 1
    (old,) = bundled
    new = old.rsplit("/", 1)[0] + "/" + SONAME
    if new in files:
        print(f"wheel_openmp: {args.wheel.name} already holds {new}", file=sys.stderr)
        return 1
    changed: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "libgomp"
        lib.write_bytes(files[old])
        old_soname = patchelf(args.patchelf, "--print-soname", str(lib))
        patchelf(args.patchelf, "--set-soname", SONAME, str(lib))
        changed[new] = lib.read_bytes()
        for name, data in files.items():
            if not name.endswith(".so") and ".so." not in name or name == old:
                continue
            path = Path(tmp) / "elf"
            path.write_bytes(data)
            if old_soname in patchelf(args.patchelf, "--print-needed", str(path)).split():
                patchelf(args.patchelf, "--replace-needed", old_soname, SONAME, str(path))
                changed[name] = path.read_bytes()
    if len(changed) < 2:
        print(f"wheel_openmp: nothing in {args.wheel.name} needs {old_soname}", file=sys.stderr)
        return 1
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    rows = [r for r in csv.reader(io.StringIO(files[record].decode())) if r and r[0] != old]
    out_rows = [record_line(r[0], changed[r[0]]) if r[0] in changed else r for r in rows]
    out_rows.append(record_line(new, changed[new]))
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(out_rows)
    changed[record] = text.getvalue().encode()
    tmp_wheel = args.wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp_wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for info in infos:
            if info.filename == old:
                renamed = zipfile.ZipInfo(new, info.date_time)
                renamed.external_attr = info.external_attr
                renamed.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(renamed, changed[new])
            else:
                zf.writestr(info, changed.get(info.filename, files[info.filename]))
    tmp_wheel.replace(args.wheel)
    patched = sorted(n for n in changed if n not in (new, record))
    print(f"wheel_openmp: {old} -> {new} (soname {SONAME}); {', '.join(patched)} now need {SONAME}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
