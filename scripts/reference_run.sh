#!/usr/bin/env bash
# The study's reference run (profile cpu-reference), one notebook at a time, resumable across
# days and machines: the answers already paid for are imported from results/reference/llm-cache/
# first, so finished work costs no LLM call. After each notebook, notebook 90 rewrites REPORT.md
# and publishes the compact results to results/reference/. With --commit, that folder is
# committed after each notebook, and every --every minutes (default 15) the answers the model
# gave since the last checkpoint are written as the next append-only part of
# results/reference/llm-cache/ and committed, so a kill or a fresh checkout loses at most those
# minutes even inside a long notebook. Never run it beside another model job.
#
# --profile P runs another reference profile (e.g. cpu-reference-1.5b: the 1.5B re-runs); its
# results, LLM-cache parts and commits go to that profile's notebooks.90_report.publish_dir.
# A re-run notebook replaces its published runs (another n leaves no stale run beside).
# After a change to the report's code, or a re-run of a folder another one's findings quote,
# `.venv/bin/python -m kgrag_lib.report.publish results/reference --profile cpu-reference`
# rebuilds FINDINGS.md, README's findings block and REPORT.md from the committed results alone.
#
#   bash scripts/reference_run.sh [--profile P] [--commit] [--every MINUTES] [NOTEBOOK_PREFIX ...]   (default: every notebook)
set -euo pipefail
cd "$(dirname "$0")/.."
commit=0
every=15
profile=cpu-reference
usage="accepted: [--profile P] [--commit] [--every MINUTES] [NOTEBOOK_PREFIX ...]"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile)
      if [ $# -lt 2 ] || [ -z "${2// /}" ]; then
        echo "reference_run: --profile needs a profile name, e.g. --profile cpu-reference-1.5b" >&2; exit 2
      fi
      profile="$2"; shift 2 ;;
    --commit) commit=1; shift ;;
    --every) every="${2-}"; shift $(( $# > 1 ? 2 : 1 )) ;;
    --) shift; break ;;
    -*) echo "reference_run: unknown option '$1'; $usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$every" in   # whole minutes > 0: -1 or abc would end the checkpoint loop at once, 0 would spin
  ''|*[!0-9]*|0*) echo "reference_run: --every '$every': expected a whole number of minutes > 0, without leading zeros (e.g. 15)" >&2; exit 2 ;;
esac
books=("$@")
if [ ${#books[@]} -eq 0 ]; then
  books=($(ls notebooks/[0-9][0-9]_*.ipynb | xargs -n1 basename | cut -c1-2 | grep -v '^90$'))
fi
dest=$(.venv/bin/python -c "import sys; from kgrag_lib.errors import KgragError; \
from kgrag_lib.studies.profiles import load_profile
try: prof = load_profile(sys.argv[1])
except (KgragError, OSError, ValueError, RecursionError) as e: sys.exit(f'reference_run: --profile {sys.argv[1]!r}: {e}')
print((prof.get('notebooks', {}).get('90_report') or {}).get('publish_dir') or '')" "$profile") || exit 2
if [ -z "$dest" ]; then echo "reference_run: profile $profile has no notebooks.90_report.publish_dir" >&2; exit 2; fi
for nb in "${books[@]}"; do   # each names a notebook (as `kgrag study --only` matches it), before anything runs
  found=""
  case "$nb" in
    ''|-*|*/*|*[*?[]*) ;;
    *) for f in notebooks/"$nb"*.ipynb; do [ -e "$f" ] && found=1; done ;;
  esac
  if [ -z "$found" ]; then
    echo "reference_run: '$nb' is no notebook prefix (options come first); expected e.g. 11 or 20_hotpotqa; $usage" >&2
    exit 2
  fi
done
parts=$dest/llm-cache
lock=results/.reference-publish.lock
mkdir -p "$dest"
if [ -d "$parts" ]; then .venv/bin/kgrag cache import "$parts"; fi
if [ -f "$dest/llm-cache.jsonl.gz" ]; then .venv/bin/kgrag cache import "$dest/llm-cache.jsonl.gz"; fi

commit_reference() {  # $1: message; $2...: the paths to commit, by default $dest with what its publishing rewrote
  # beside it (README's findings block, and the REPORT/FINDINGS of a results folder whose findings quote $dest);
  # retrying while git is busy
  [ "$commit" = 1 ] || return 0
  local msg="$1"; shift
  local paths=("$@")
  if [ ${#paths[@]} -eq 0 ]; then
    paths=("$dest" README.md results/reference*/FINDINGS.md results/reference*/REPORT.md results/reference*/REPORT.html)
  fi
  [ -n "$(git status --porcelain -- "${paths[@]}")" ] || return 0
  for try in 1 2 3 4 5; do
    git add -- "${paths[@]}" && git commit -q -m "$msg" -- "${paths[@]}" && return 0 || sleep 10
  done
  echo "reference_run: could not commit ($msg); the files stay in $dest" >&2
}

checkpoint() {  # under the lock: never beside notebook 90's publishing of the same folder
  ( flock 9
    .venv/bin/kgrag cache export --parts "$parts" || exit 0
    # the new cache parts only: an edit of README or a report beside a running unit is not this commit's
    commit_reference "Reference run ($profile): checkpoint of the LLM answers ($(date -u +%FT%TZ))" "$parts" ) 9>"$lock"
}

if [ "$commit" = 1 ]; then
  ( while sleep $((every * 60)); do checkpoint; done ) &
  loop=$!
  trap 'kill $loop 2>/dev/null || true' EXIT
fi
for nb in "${books[@]}"; do
  echo "== $(date +%T) notebook $nb"
  .venv/bin/kgrag study --profile "$profile" --only "$nb"
  ( flock 9
    .venv/bin/kgrag study --profile "$profile" --only 90
    commit_reference "Reference run ($profile): notebook $nb done (compact results, REPORT.md)" ) 9>"$lock"
done
checkpoint
echo "== $(date +%T) done"
