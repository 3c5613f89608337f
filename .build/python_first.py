"""The build backend: setuptools', after one check. pip 23 resolves a local project's dependencies before its
Requires-Python, so Python 3.10 met a dependency conflict instead of the reason (issue 40)."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (the point: this runs on an older Python)
    raise SystemExit(
        f"managed-tools needs Python 3.11 or newer; this is Python {sys.version.split()[0]}. "
        "Make the venv with a newer one: python3.11 -m venv .venv"
    )

from setuptools.build_meta import *  # noqa: F403
