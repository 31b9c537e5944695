#!/usr/bin/env bash
# Installs the Python package (python/snnc: pure Python over ctypes, numpy its one dependency) for
# the python3 first on PATH, editable (it imports this checkout's python/snnc, so it never goes
# stale), and nothing when that Python already imports it from here. A system Python that pip may
# not change (Debian's, marked EXTERNALLY-MANAGED) is left alone: a note says to use a virtual
# environment or PYTHONPATH=python. tools/setup.sh runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
python=$(command -v python3) || { echo "install-python-package: no python3 on PATH: skipped" >&2; exit 0; }
where=$(cd / && python3 -c 'import os, snnc; print(os.path.dirname(os.path.abspath(snnc.__file__)))' \
        2>/dev/null || true)
[ "$where" = "$here/python/snnc" ] && exit 0
managed=$(python3 -c 'import sys, sysconfig, os
print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
if [ "$managed" = 1 ]; then
  echo "install-python-package: $python is the system's Python, which pip may not change: the" \
       "snnc package is not installed (use a virtual environment, or PYTHONPATH=$here/python)" >&2
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "install-python-package: $python has no pip; installing it with ensurepip" >&2
  python3 -m ensurepip --upgrade >/dev/null
fi
echo "install-python-package: installing python/snnc (editable) for $python" >&2
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e ./python
where=$(cd / && python3 -c 'import os, snnc; print(os.path.dirname(os.path.abspath(snnc.__file__)))')
[ "$where" = "$here/python/snnc" ] || { echo "install-python-package: python3 imports snnc from $where" >&2; exit 1; }
