"""Which of PyTorch's wheel indexes (download.pytorch.org/whl/cuXYZ) carries a given torch release, and
which of them a driver can run: the doctor's fix line and `scripts/install_vllm.sh`'s CUDA 12 route.

Standard library only, and runnable as a file (`python kgrag_lib/doctor/torch_cuda.py --torch 2.14.0
--driver-cuda 12.4` prints the index tag), because install_vllm.sh calls it before kgrag is installed.

The table is PyTorch's, not a rule of thumb: each release publishes CUDA builds for a few CUDA versions
only, and the set moves (cu129 carried 2.8 alone; 2.12 dropped cu128). Sources, Linux x86-64 wheels:
  - the Release Compatibility Matrix, https://github.com/pytorch/pytorch/blob/main/RELEASE.md
    #release-compatibility-matrix (2.13 and 2.14 rows: pytorch/pytorch#187075 and #194367);
  - the install commands per release, https://pytorch.org/get-started/previous-versions/ (2.6-2.9);
  - the CUDA support RFCs: 2.11 #172663 (12.6, 12.8, 13.0), 2.12 #178665 (12.8 dropped, 13.2 added),
    2.14 #190355 (13.2 on PyPI). The 2.15 row follows RFC #190385 (12.6 removed, so no CUDA 12 build
    at all), which was still open when this table was written: check it against the matrix when 2.15's
    row appears there.
A driver runs a build of its own CUDA major up to its own minor and, by minor-version compatibility,
later minors of that major; never a build of a later major (a CUDA 12 driver, < 580, sees no GPU
through a CUDA 13 torch).
"""

from __future__ import annotations

import argparse
import sys

# torch major.minor -> the CUDA versions of its wheel indexes (cuXYZ), oldest first
TORCH_CUDA_INDEXES: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 6): ("11.8", "12.4", "12.6"),
    (2, 7): ("11.8", "12.6", "12.8"),
    (2, 8): ("12.6", "12.8", "12.9"),
    (2, 9): ("12.6", "12.8", "13.0"),
    (2, 10): ("12.6", "12.8", "13.0"),
    (2, 11): ("12.6", "12.8", "13.0"),
    (2, 12): ("12.6", "13.0", "13.2"),
    (2, 13): ("12.6", "13.0", "13.2"),
    (2, 14): ("12.6", "13.0", "13.2"),
    (2, 15): ("13.0", "13.2"),
}
SOURCE = "PyTorch's Release Compatibility Matrix (github.com/pytorch/pytorch/blob/main/RELEASE.md)"
INDEX_URL = "https://download.pytorch.org/whl/"


def _ver(text: str) -> tuple[int, int] | None:
    """(major, minor) of "2.14.0+cu130" or "12.4"; None when it is not a version."""
    try:
        major, minor = text.split("+", 1)[0].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def tag(cuda: str) -> str:
    """"12.6" -> "cu126"."""
    major, minor = _ver(cuda) or (0, 0)
    return f"cu{major}{minor}"


def runnable(cuda: str, driver_cuda: str) -> bool:
    """Whether a driver supporting CUDA `driver_cuda` runs a build for `cuda`: same major (minor-version
    compatibility), or an older major (the driver is backward compatible)."""
    b, d = _ver(cuda), _ver(driver_cuda)
    return bool(b and d) and b[0] <= d[0]


def index_for(torch_version: str, driver_cuda: str) -> str | None:
    """The index tag of `torch_version` this driver runs best, or None when that release has no build the
    driver can run (or is not in the table): the newest build not above the driver's CUDA, else the
    oldest build of the driver's own major (minor-version compatibility)."""
    t, d = _ver(torch_version), _ver(driver_cuda)
    if t is None or d is None or t not in TORCH_CUDA_INDEXES:
        return None
    ok = [c for c in TORCH_CUDA_INDEXES[t] if runnable(c, driver_cuda)]
    if not ok:
        return None
    at_most = [c for c in ok if _ver(c) <= d]
    return tag(at_most[-1] if at_most else ok[0])


def newest_release_for(driver_cuda: str) -> tuple[str, str] | None:
    """(torch "X.Y", index tag) of the newest release in the table with a build this driver runs."""
    for t in sorted(TORCH_CUDA_INDEXES, reverse=True):
        found = index_for(f"{t[0]}.{t[1]}", driver_cuda)
        if found:
            return f"{t[0]}.{t[1]}", found
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Print PyTorch's wheel index tag (cuXYZ) for a torch release and a "
                                             "driver's CUDA version, from " + SOURCE)
    ap.add_argument("--torch", required=True, help="torch release, e.g. 2.14.0")
    ap.add_argument("--driver-cuda", required=True, help="the CUDA version nvidia-smi's header shows, e.g. 12.4")
    a = ap.parse_args(argv)
    found = index_for(a.torch, a.driver_cuda)
    if found is None:
        newest = newest_release_for(a.driver_cuda)
        print(f"torch_cuda.py: PyTorch publishes no build of torch {a.torch} that a CUDA {a.driver_cuda} driver runs"
              + (f"; the newest release with one is {newest[0]} ({INDEX_URL}{newest[1]})" if newest else ""),
              file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
