#!/usr/bin/env bash
# Evaluate burble on a manifest: data -> transcribe -> score (WER/CER, RTF, plots, markdown report).
#
#   recipes/eval_manifest/run.sh                                   # the dev set beside the repository
#   recipes/eval_manifest/run.sh --manifest data/test.jsonl --exp-dir exp/test --workers 2
#   recipes/eval_manifest/run.sh --stage 2 --stop-stage 2          # re-score only
#   recipes/eval_manifest/run.sh --batch-size 0 --beam-size 5      # long-form beam search
#
# Stages (icefall/ESPnet style; each is re-runnable, --stage/--stop-stage select a range):
#   0  data:        validate the manifest, write $exp_dir/data/manifest.jsonl (absolute paths)
#   1  transcribe:  burble transcribe --resume -> $exp_dir/hyp/<id>.{json,txt}, records, errors, summary
#   2  score:       burble score -> $exp_dir/report/{report.md, per_utterance.tsv, scores.json, *.png}
set -euo pipefail

stage=0
stop_stage=100
manifest=""           # default: <repo>/../shared/dev-audio/manifest.jsonl
exp_dir=""            # default: recipes/eval_manifest/exp
model=tiny.en
beam_size=1
batch_size=8          # 0 = long-form decoding (one window at a time, previous-text prompts)
workers=1
threads=0             # torch threads per worker (0 = cores / workers)
engine=local
limit=0               # evaluate the first N items only (0 = all)
extra=""              # more `burble transcribe` flags, e.g. "--lm lm.arpa --lm-alpha 0.5"

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; echo "options: --stage --stop-stage --manifest --exp-dir --model --beam-size --batch-size --workers --threads --engine --limit --extra"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --manifest) manifest=$2; shift 2 ;;
    --exp-dir) exp_dir=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --beam-size) beam_size=$2; shift 2 ;;
    --batch-size) batch_size=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

recipe_dir=$(cd "$(dirname "$0")" && pwd)
manifest=${manifest:-$recipe_dir/../../../shared/dev-audio/manifest.jsonl}
exp_dir=${exp_dir:-$recipe_dir/exp}
# `burble` on PATH, else the repository's virtual environment, else python3.
if [ -z "${BURBLE:-}" ]; then
  if command -v burble >/dev/null 2>&1; then BURBLE=burble
  elif [ -x "$recipe_dir/../../.venv/bin/python" ]; then BURBLE="$recipe_dir/../../.venv/bin/python -m burble"
  else BURBLE="python3 -m burble"; fi
fi
PYTHON=${PYTHON:-$(echo "$BURBLE" | awk '{print ($2 == "-m") ? $1 : "python3"}')}
log() { echo "$(date '+%F %T') [eval_manifest] $*" >&2; }

data=$exp_dir/data/manifest.jsonl
hyp=$exp_dir/hyp
report=$exp_dir/report
mkdir -p "$exp_dir"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: data ($manifest)"
  $PYTHON "$recipe_dir/local/prepare_manifest.py" "$manifest" "$data" --limit "$limit"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log "stage 1: transcribe (model $model, beam $beam_size, batch ${batch_size}, workers $workers, engine $engine)"
  batch_flags=()
  [ "$batch_size" -gt 0 ] && batch_flags=(--batch-size "$batch_size")
  # Exit code 1 means "some files failed" (listed in errors.jsonl): scoring still runs.
  # shellcheck disable=SC2086
  $BURBLE transcribe "$data" -o "$hyp" -f json,txt --model "$model" --beam-size "$beam_size" \
    "${batch_flags[@]}" --workers "$workers" --threads "$threads" --engine "$engine" --resume \
    --records-file "$exp_dir/records.jsonl" --errors-file "$exp_dir/errors.jsonl" \
    --summary-file "$exp_dir/summary.json" --quiet $extra || [ $? -eq 1 ]
  cat "$exp_dir/summary.json" >&2
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log "stage 2: score"
  $BURBLE score "$data" "$hyp" -o "$report" --records "$exp_dir/records.jsonl" --summary "$exp_dir/summary.json" \
    --title "burble $model on $(basename "$manifest") (beam $beam_size, batch ${batch_size})"
  log "report: $report/report.md"
fi
