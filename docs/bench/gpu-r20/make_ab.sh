#!/usr/bin/env bash
# Builds .ab/ (ignored; carry it: run(carry=[".ab"])): this tree with runtime/attention.py and
# offload/tier.py as they were at 34498b3, the "old" side of gpu2.sh's before/after.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rm -rf .ab && mkdir -p .ab/triforce .git/info
grep -qx "/.ab/" .git/info/exclude 2>/dev/null || echo "/.ab/" >> .git/info/exclude
cp -r runtime offload actors .ab/triforce/
find .ab -name __pycache__ -prune -exec rm -rf {} +
git show 34498b3:runtime/attention.py > .ab/triforce/runtime/attention.py
git show 34498b3:offload/tier.py > .ab/triforce/offload/tier.py
echo "built .ab/ ($(du -sh .ab | cut -f1))"
