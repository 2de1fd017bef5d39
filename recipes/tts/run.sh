#!/usr/bin/env bash
# burble's TTS voice: a codec language model over the shipped codec's tokens, conditioned on
# phonemes with their durations spelled out in the token stream. Trained on CPU from Piper speech.
#
#   recipes/tts/run.sh                          # data, train, export, report, draft heads
#   recipes/tts/run.sh --stage 1 --steps 3000   # train longer on the data already made (resumes)
#
# Stages (re-runnable and resumable; --stage/--stop-stage select a range):
#   0  data:    LJ sentences -> burble's phonemes -> Piper audio with per-phoneme durations -> codec
#               codes, in shards under $cache/data (finished shards are kept: a rerun resumes)
#   1  train:   the codec LM (checkpoint every 50 steps: model, optimiser, step, log; resumes)
#   2  export:  -> burble/tts/weights/<name>.safetensors (what burble ships)
#   3  report:  loss curves and the last validation -> RESULTS.md, report.png
#   4  heads:   MTP draft heads for the exported voice: (a) its own greedy token streams for LJ
#               sentences outside every test set, in shards under $cache/streams (finished shards are
#               kept); (b) heads that learn its argmax over them (checkpoint every 250 steps; resumes)
#               -> burble/tts/weights/<name>.mtp.safetensors (burble speak --speculative mtp)
#
# Data (3500 sentences, 5.3 h of speech) takes ~25 min on 2 cores, training (2000 steps) ~70 min,
# the draft heads' streams (3000 sentences) ~30 min and their training (12000 steps) ~110 min. (The
# shipped heads trained 1500 steps and were then resumed to 3000, 6000 and 12000, the learning
# rate jumping back up at each: teacher-forced acceptance 0.52-0.54 -> 0.56-0.58 per head.)
set -euo pipefail

stage=0
stop_stage=100
clips=3500
heldout=40
steps=2000
head_steps=12000
stream_sentences=3000
books=2
name=joe
threads=0
cache=""              # default: ~/.cache/burble/tts

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --clips) clips=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --head-steps) head_steps=$2; shift 2 ;;
    --stream-sentences) stream_sentences=$2; shift 2 ;;
    --books) books=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

recipe_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$recipe_dir/../.." && pwd)
cache=${cache:-$HOME/.cache/burble/tts}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PYTHON=$repo/.venv/bin/python; else PYTHON=python3; fi
fi
log() { echo "$(date '+%F %T') [tts] $*" >&2; }
mkdir -p "$cache"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: $clips training + $heldout validation Piper sentences -> $cache/data"
  $PYTHON "$recipe_dir/local/prepare.py" --out-dir "$cache/data" --clips "$clips" --heldout "$heldout"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log "stage 1: train $steps steps -> $cache/exp"
  $PYTHON "$recipe_dir/local/train.py" --data-dir "$cache/data" --exp-dir "$cache/exp" --steps "$steps" \
    --books "$books" --threads "$threads"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log "stage 2: export -> burble/tts/weights/$name.safetensors"
  $PYTHON "$recipe_dir/local/export.py" --checkpoint "$cache/exp/checkpoint.pt" --out "$repo/burble/tts/weights/$name.safetensors"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  log "stage 3: report -> $recipe_dir/RESULTS.md"
  $PYTHON "$recipe_dir/local/report.py" --checkpoint "$cache/exp/checkpoint.pt" --out-dir "$recipe_dir" \
    --data "Data: $clips Piper (en_US-joe-medium) LJ sentences rendered from burble's own phonemes, $heldout for validation."
fi
if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  log "stage 4: draft heads -> burble/tts/weights/$name.mtp.safetensors"
  $PYTHON "$recipe_dir/local/greedy_streams.py" --voice "$repo/burble/tts/weights/$name.safetensors" \
    --out-dir "$cache/streams" --sentences "$stream_sentences"
  $PYTHON "$recipe_dir/local/heads.py" --voice "$repo/burble/tts/weights/$name.safetensors" --streams-dir "$cache/streams" \
    --exp-dir "$cache/heads" --out "$repo/burble/tts/weights/$name.mtp.safetensors" --steps "$head_steps" --threads "$threads" \
    --results "$recipe_dir/RESULTS.md"
fi
log "done"
