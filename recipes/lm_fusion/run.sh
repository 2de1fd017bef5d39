#!/usr/bin/env bash
# Domain-LM shallow fusion: build an n-gram LM on domain text, then evaluate without and with it.
#
#   recipes/lm_fusion/run.sh                       # LJ Speech book text -> the LJ clips of the dev set
#   recipes/lm_fusion/run.sh --lm-alpha 0.3 --lm-beta 0.5 --stage 2
#
# Stages (re-runnable; --stage/--stop-stage select a range):
#   0  data:     the evaluation manifest (dev-set items whose id matches --ids) -> $exp_dir/data/manifest.jsonl
#   1  lm:       a --order-gram Kneser-Ney LM on --corpus, evaluation references excluded -> $exp_dir/lm/lm.arpa
#   2  decode:   ../eval_manifest/run.sh (transcribe + score) without LM -> $exp_dir/baseline, with LM -> $exp_dir/fusion
#   3  compare:  one table of both reports -> $exp_dir/compare.md
set -euo pipefail

stage=0
stop_stage=100
manifest=""            # default: <repo>/../shared/dev-audio/manifest.jsonl
ids='^lj_'             # evaluation items (regular expression on ids); '' = all
corpus=""              # default: <repo>/../shared/text/ljspeech_sentences.tsv
text_column=1          # tab-separated column of the corpus text (LJ: id<TAB>text)
order=3
lm_alpha=0.5
lm_beta=1.0
beam_size=1
batch_size=8
threads=0
exp_dir=""             # default: recipes/lm_fusion/exp

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --manifest) manifest=$2; shift 2 ;;
    --ids) ids=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --text-column) text_column=$2; shift 2 ;;
    --order) order=$2; shift 2 ;;
    --lm-alpha) lm_alpha=$2; shift 2 ;;
    --lm-beta) lm_beta=$2; shift 2 ;;
    --beam-size) beam_size=$2; shift 2 ;;
    --batch-size) batch_size=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --exp-dir) exp_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

recipe_dir=$(cd "$(dirname "$0")" && pwd)
manifest=${manifest:-$recipe_dir/../../../shared/dev-audio/manifest.jsonl}
corpus=${corpus:-$recipe_dir/../../../shared/text/ljspeech_sentences.tsv}
exp_dir=${exp_dir:-$recipe_dir/exp}
eval_recipe=$recipe_dir/../eval_manifest
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$recipe_dir/../../.venv/bin/python" ]; then PYTHON=$recipe_dir/../../.venv/bin/python; else PYTHON=python3; fi
fi
log() { echo "$(date '+%F %T') [lm_fusion] $*" >&2; }
mkdir -p "$exp_dir"
data=$exp_dir/data/manifest.jsonl
lm=$exp_dir/lm/lm.arpa

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: data ($manifest, ids matching '$ids')"
  $PYTHON "$eval_recipe/local/prepare_manifest.py" "$manifest" "$data" --require-text ${ids:+--ids "$ids"}
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log "stage 1: $order-gram LM on $corpus"
  mkdir -p "$(dirname "$lm")"
  $PYTHON "$recipe_dir/local/build_lm.py" "$corpus" "$lm" --order "$order" --text-column "$text_column" --exclude "$data"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  common=(--manifest "$data" --beam-size "$beam_size" --batch-size "$batch_size" --threads "$threads")
  log "stage 2: decode without LM"
  "$eval_recipe/run.sh" "${common[@]}" --exp-dir "$exp_dir/baseline"
  log "stage 2: decode with LM (alpha $lm_alpha, beta $lm_beta)"
  "$eval_recipe/run.sh" "${common[@]}" --exp-dir "$exp_dir/fusion" \
    --extra "--lm $lm --lm-alpha $lm_alpha --lm-beta $lm_beta"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  log "stage 3: compare"
  $PYTHON "$recipe_dir/local/compare.py" "$exp_dir/compare.md" \
    "baseline=$exp_dir/baseline" "fusion (alpha $lm_alpha, beta $lm_beta)=$exp_dir/fusion"
fi
