#!/usr/bin/env bash
# Runs the test suite against the oldest GPyTorch stack setup.cfg claims (constraints-oldest.txt), in its own
# virtual environment .venv-oldest, created from nothing on the first run. Extra arguments go to pytest.
# Captum, LIME and SHAP are not installed there: the explainer-adapter tests skip (jupytext is, so the tutorials run). torch is the dev pin (2.13.0,
# the only CPU wheel on the project machines), so setup.cfg's torch floor is not exercised.
# Cost on the project machine (2 shared cores): creating the environment ~160 s; the suite as long as scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${GPX_OLDEST_VENV:-$root/.venv-oldest}"
python="${PYTHON:-python3.11}"
stamp="$venv/.gpytorch-explain-oldest"
want="$(cat constraints-oldest.txt setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "[oldest] creating virtual environment in $venv"
  "$python" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  start=$SECONDS
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # torch first and pinned: an unpinned resolve would pull the multi-GB CUDA build.
  "$venv/bin/python" -m pip install -q -c constraints-oldest.txt "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -c constraints-oldest.txt \
    gpytorch linear_operator botorch numpy scipy scikit-learn matplotlib tqdm pytest mpmath jupytext
  "$venv/bin/python" -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
  echo "[oldest] installed in $((SECONDS - start)) s"
fi
"$venv/bin/python" -c "import torch, gpytorch, linear_operator, botorch; print('[oldest] torch', torch.__version__, \
'gpytorch', gpytorch.__version__, 'linear_operator', linear_operator.__version__, 'botorch', botorch.__version__)"
start=$SECONDS
MPLBACKEND="${MPLBACKEND:-Agg}" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
echo "[oldest] tests ran in $((SECONDS - start)) s"
