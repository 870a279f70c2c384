#!/usr/bin/env bash
# Sets up everything from nothing and runs the demo: GPX vs GP regression on scikit-learn's
# diabetes data, one explained prediction, and a bar chart (gpx_demo_explanation.png).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh demo
python tutorials/demo_diabetes.py --out gpx_demo_explanation.png "$@"
