#!/usr/bin/env bash
# The study's reference run (profile cpu-reference), one notebook at a time, resumable across
# days: answers already paid for are imported from results/reference/llm-cache.jsonl.gz first;
# after each notebook, notebook 90 rewrites REPORT.md and publishes the compact results and the
# LLM answers to results/reference/, and (with --commit) that folder is committed, so a kill or
# a fresh checkout loses at most the notebook in flight. Never run it beside another model job.
#
#   bash scripts/reference_run.sh [--commit] [NOTEBOOK_PREFIX ...]     (default: every notebook)
set -euo pipefail
cd "$(dirname "$0")/.."
commit=0
if [ "${1:-}" = "--commit" ]; then commit=1; shift; fi
books=("$@")
if [ ${#books[@]} -eq 0 ]; then
  books=($(ls notebooks/[0-9][0-9]_*.ipynb | xargs -n1 basename | cut -c1-2 | grep -v '^90$'))
fi
if [ -f results/reference/llm-cache.jsonl.gz ]; then
  .venv/bin/kgrag cache import results/reference/llm-cache.jsonl.gz
fi
for nb in "${books[@]}"; do
  echo "== $(date +%T) notebook $nb"
  .venv/bin/kgrag study --profile cpu-reference --only "$nb"
  .venv/bin/kgrag study --profile cpu-reference --only 90
  if [ "$commit" = 1 ] && [ -n "$(git status --porcelain results/reference)" ]; then
    for try in 1 2 3 4 5; do
      git add results/reference && git commit -q -m "Reference run: notebook $nb done (compact results, REPORT.md)" \
        -- results/reference && break || sleep 10
    done
  fi
done
echo "== $(date +%T) done"
