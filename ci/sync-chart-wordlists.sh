#!/usr/bin/env bash
# Copy the repository's word lists (wordlists/) into the Helm chart (helm/guardrail/files/wordlists/).
# Helm can only read files inside the chart directory, so the chart carries a copy; run this after
# editing wordlists/. tests/helm/test_helm.py fails when the copy differs from wordlists/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/wordlists"
dst="$root/helm/guardrail/files/wordlists"
mkdir -p "$dst"
find "$dst" -mindepth 1 -maxdepth 1 -type f -delete
find "$src" -mindepth 1 -maxdepth 1 -type f -exec cp {} "$dst/" \;
echo "synced $(find "$dst" -type f | wc -l) files: wordlists/ -> helm/guardrail/files/wordlists/"
