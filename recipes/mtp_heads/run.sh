#!/usr/bin/env bash
# Multi-token-prediction draft heads for Whisper by self-distillation (frozen Whisper, heads only).
#
#   recipes/mtp_heads/run.sh                         # tiny.en: data, train, export, report
#   recipes/mtp_heads/run.sh --stage 1 --epochs 20   # retrain on the data already made
#   recipes/mtp_heads/run.sh --drafter eagle --clips 3000 --seed 2   # the EAGLE-style draft layer
#
# Stages (re-runnable and resumable; --stage/--stop-stage select a range):
#   0  data:    Piper + espeak-ng speech of LJ sentences -> Whisper's greedy transcripts and decoder
#               states, in shards under $cache/data (finished shards are kept: a rerun resumes)
#   1  train:   the draft vocabulary, then the heads (checkpoint: model, optimiser, epoch, position);
#               --drafter eagle: one draft decoder layer instead (local/train_eagle.py); with
#               --feature-layers, the decoder's block outputs first (local/layer_states.py)
#   2  export:  heads -> burble/asr/whisper/heads/<model>.mtp.safetensors (what burble ships);
#               the draft layer -> <model>.eagle.safetensors
#   3  report:  curves and acceptance on the real dev speech -> RESULTS.md, report.png
#
# The data (1200 clips, ~1.4 GB with encoder states) takes ~25 min on 2 cores, training ~15 min.
set -euo pipefail

stage=0
stop_stage=100
model=tiny.en
clips=1200            # synthetic clips (about 35 transcript tokens each)
seed=1                # sentence and voice draw of stage 0
epochs=""            # default: 10 for the heads, 8 for the draft layer
num_heads=4
inner_size=512
memory_heads=6        # heads attend to the audio (0: text-only heads)
draft_vocab=4096
threads=0             # torch threads of training (0: all cores)
drafter=heads         # heads (Hydra-style MTP heads) or eagle (a one-layer draft model)
eagle_vocab=8192      # the draft layer's vocabulary (its output rows are fine-tuned)
feature_layers=0,2     # draft layer: Whisper blocks whose outputs join its input feature (EAGLE-3; "": none)
kd_weight=1           # draft layer: weight of the soft-target loss (Whisper's distribution) beside the greedy token
workers=2             # stage-0 processes (one torch thread each)
augment=0             # share of stage-0 clips given room, noise, speed, phone-band and level effects
cache=""              # default: ~/.cache/burble/mtp_heads/<model>

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --clips) clips=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --inner-size) inner_size=$2; shift 2 ;;
    --memory-heads) memory_heads=$2; shift 2 ;;
    --num-heads) num_heads=$2; shift 2 ;;
    --draft-vocab) draft_vocab=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --drafter) drafter=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --augment) augment=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --feature-layers) feature_layers=$2; shift 2 ;;
    --kd-weight) kd_weight=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

recipe_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$recipe_dir/../.." && pwd)
cache=${cache:-$HOME/.cache/burble/mtp_heads/$model}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PYTHON=$repo/.venv/bin/python; else PYTHON=python3; fi
fi
log() { echo "$(date '+%F %T') [mtp_heads] $*" >&2; }
mkdir -p "$cache"

if [ "$drafter" != heads ] && [ "$drafter" != eagle ]; then
  echo "run.sh: --drafter is heads or eagle, not $drafter" >&2; exit 2
fi

if [ -z "$epochs" ]; then if [ "$drafter" = eagle ]; then epochs=8; else epochs=10; fi; fi

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: $clips synthetic clips -> $cache/data ($workers processes)"
  pids=()
  for ((w = 0; w < workers; w++)); do
    OMP_NUM_THREADS=1 $PYTHON "$recipe_dir/local/prepare.py" --out-dir "$cache/data" --model "$model" --clips "$clips" \
      --seed "$seed" --augment "$augment" --threads 1 --workers "$workers" --worker "$w" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  if [ "$drafter" = eagle ]; then
    log "stage 1: train the draft layer ($epochs epochs) -> $cache/exp"
    $PYTHON "$recipe_dir/local/train_eagle.py" --data "$cache/data" --exp-dir "$cache/exp" --model "$model" \
      --epochs "$epochs" --draft-vocab "$eagle_vocab" --threads "$threads" --feature-layers "$feature_layers" --kd-weight "$kd_weight"
  else
    log "stage 1: train $num_heads heads ($epochs epochs) -> $cache/exp"
    $PYTHON "$recipe_dir/local/train.py" --data "$cache/data" --exp-dir "$cache/exp" --model "$model" \
      --epochs "$epochs" --num-heads "$num_heads" --inner-size "$inner_size" --memory-heads "$memory_heads" \
      --draft-vocab "$draft_vocab" --threads "$threads"
  fi
fi

kind=mtp; trained=heads.safetensors; results=RESULTS.md
if [ "$drafter" = eagle ]; then kind=eagle; trained=eagle.safetensors; results=RESULTS_eagle.md; fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log "stage 2: export -> burble/asr/whisper/heads/$model.$kind.safetensors"
  cp "$cache/exp/$trained" "$repo/burble/asr/whisper/heads/$model.$kind.safetensors"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  log "stage 3: report -> $recipe_dir/$results"
  if [ "$drafter" = eagle ]; then
    $PYTHON "$recipe_dir/local/report_eagle.py" --exp-dir "$cache/exp" --model "$model" \
      --layer "$repo/burble/asr/whisper/heads/$model.eagle.safetensors" --out "$recipe_dir"
  else
    $PYTHON "$recipe_dir/local/report.py" --exp-dir "$cache/exp" --model "$model" \
      --heads "$repo/burble/asr/whisper/heads/$model.mtp.safetensors" --out "$recipe_dir"
  fi
fi
