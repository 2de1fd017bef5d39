#!/usr/bin/env bash
# A streaming mel codec for burble: Piper speech -> log-mel -> causal encoder -> RVQ codes -> causal
# decoder -> log-mel -> the pretrained HiFi-GAN vocoder. Trained by plain regression (no GAN) on CPU.
#
#   recipes/codec/run.sh                          # data, train, export, report
#   recipes/codec/run.sh --stage 1 --steps 8000   # train longer on the data already made
#
# Stages (re-runnable and resumable; --stage/--stop-stage select a range):
#   0  data:    Piper-voiced LJ sentences at 22.05 kHz with their log-mels, in shards under
#               $cache/data (a held-out slice of sentences too; finished shards are kept)
#   1  train:   the codec (checkpoint: model with VQ statistics, optimiser, step; resumes)
#   2  export:  -> burble/codecs/weights/<name>.safetensors (what burble ships)
#   3  refine:  grow the decoder (5 residual units per rate) and train it on the frozen codes, so
#               the codes keep their meaning (checkpoint: decoder, optimiser, step; resumes);
#               the exported codec gets the refined decoder
#   4  vocoder: distil a low-latency HiFi-GAN (causal first stage, 1 frame of lookahead) from the
#               pretrained one, layer by layer by least squares (~4 min; kept once made)
#   5  export:  -> burble/codecs/vocoders/low-latency.safetensors, named as the codec's vocoder
#   6  report:  loss curves and held-out mel distance -> RESULTS.md, report.png
#
# Data (3600 clips, ~5.4 h of speech) takes ~16 min on 2 cores, codec training (6000 steps) ~45 min,
# the decoder refinement (7000 steps on all 3600 clips) ~35 min.
set -euo pipefail

stage=0
stop_stage=100
clips=3600            # stage 0 makes them; stage 1 trains on the first $train_clips, stage 3 on all
train_clips=1200
heldout=40
steps=6000
refine_steps=7000
decoder_units=5
down_stages=2         # 2: 21.5 Hz code frames, 1: 43 Hz
num_books=8
name=mel-21hz
threads=0
cache=""              # default: ~/.cache/burble/codec

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --clips) clips=$2; shift 2 ;;
    --train-clips) train_clips=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --refine-steps) refine_steps=$2; shift 2 ;;
    --decoder-units) decoder_units=$2; shift 2 ;;
    --down-stages) down_stages=$2; shift 2 ;;
    --num-books) num_books=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

recipe_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$recipe_dir/../.." && pwd)
cache=${cache:-$HOME/.cache/burble/codec}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PYTHON=$repo/.venv/bin/python; else PYTHON=python3; fi
fi
log() { echo "$(date '+%F %T') [codec] $*" >&2; }
mkdir -p "$cache"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: $clips training + $heldout held-out Piper clips -> $cache/data"
  $PYTHON "$recipe_dir/local/prepare.py" --out-dir "$cache/data" --clips "$clips" --heldout "$heldout"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log "stage 1: train $steps steps -> $cache/exp"
  $PYTHON "$recipe_dir/local/train.py" --data-dir "$cache/data" --exp-dir "$cache/exp" --steps "$steps" \
    --clips "$train_clips" --down-stages "$down_stages" --num-books "$num_books" --threads "$threads"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log "stage 2: export -> burble/codecs/weights/$name.safetensors"
  rm -rf "$cache/exp/refine"  # a refinement belongs to the codec it started from
  $PYTHON "$recipe_dir/local/export.py" --checkpoint "$cache/exp/checkpoint.pt" \
    --out "$repo/burble/codecs/weights/$name.safetensors"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  log "stage 3: refine the decoder ($decoder_units units per rate, $refine_steps steps) -> $cache/exp/refine"
  $PYTHON "$recipe_dir/local/refine_decoder.py" --data-dir "$cache/data" --exp-dir "$cache/exp/refine" \
    --codec "$repo/burble/codecs/weights/$name.safetensors" --out "$repo/burble/codecs/weights/$name.safetensors" \
    --units "$decoder_units" --steps "$refine_steps" --threads "$threads"
fi

if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  log "stage 4: distil the low-latency vocoder -> $cache/exp/vocoder"
  $PYTHON "$recipe_dir/local/distill_vocoder.py" --data-dir "$cache/data" --exp-dir "$cache/exp/vocoder" \
    --codec "$repo/burble/codecs/weights/$name.safetensors" --threads "$threads"
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  log "stage 5: export -> burble/codecs/vocoders/low-latency.safetensors (the vocoder of $name)"
  $PYTHON "$recipe_dir/local/export.py" --vocoder-checkpoint "$cache/exp/vocoder/vocoder.pt" \
    --out "$repo/burble/codecs/vocoders/low-latency.safetensors" --codec "$repo/burble/codecs/weights/$name.safetensors"
fi

if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
  log "stage 6: report -> $recipe_dir/RESULTS.md"
  $PYTHON "$recipe_dir/local/report.py" --exp-dir "$cache/exp" --out-dir "$recipe_dir"
fi
log "done"
