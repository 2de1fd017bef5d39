#!/usr/bin/env bash
# The streaming mel codecs burble ships: Piper speech -> log-mel -> causal encoder -> RVQ codes ->
# causal decoder -> log-mel -> HiFi-GAN vocoder. Trained by plain regression (no GAN) on CPU.
#
#   recipes/codec/run.sh                          # mel-43hz (the default codec): data, train, export, report
#   recipes/codec/run.sh --preset mel-21hz        # the TTS voice's codec, as it was made
#   recipes/codec/run.sh --stage 1 --steps 8000   # train longer on the data already made
#
# Presets (flags given after --preset override it):
#   mel-43hz  43 Hz code frames, widths 128,256, 5 residual units per decoder rate from the start;
#             7000 steps on all 3600 clips with books of 1024, half the rows coded with 2 books
#             (~62 min); then a fine-tune of 4200 steps with every code split in two (books of
#             2048), 70% of the rows coded with 2 books, its <= 1 kbps default (947 bit/s;
#             ~45 min); then stage 3 trains the decoder 1200 steps more on the frozen codes with
#             an ASR-feature loss and a STOI loss through the low-latency vocoder (~85 min)
#   mel-21hz  21.5 Hz, widths 128,192,256, 2 units; 6000 steps on the first 1200 clips (~45 min),
#             then stage 3 grows the decoder to 5 units on the frozen codes (7000 steps, ~35 min)
#
# Stages (re-runnable and resumable; --stage/--stop-stage select a range):
#   0  data:    Piper-voiced LJ sentences at 22.05 kHz with their log-mels, in shards under
#               $cache/data (a held-out slice of sentences too, and --test-clips more held-out
#               ones for the benchmark; finished shards are kept; ~16 min)
#   1  train:   the codec (checkpoint: model with VQ statistics, optimiser, step; resumes), then
#               when --finetune-steps > 0 the fine-tune from it, under $exp/finetune (resumes too)
#   2  export:  -> burble/codecs/weights/<name>.safetensors (what burble ships)
#   3  refine:  (when --refine-steps > 0) grow the decoder to --decoder-units per rate and train it
#               on the frozen codes, so the codes keep their meaning (checkpoint: decoder,
#               optimiser, step; resumes); the exported codec gets the refined decoder
#   4  vocoder: distil a low-latency HiFi-GAN (causal first stage, 1 frame of lookahead) from the
#               pretrained one, layer by layer by least squares (~4 min; kept once made)
#   5  export:  -> burble/codecs/vocoders/low-latency.safetensors, named as the codec's vocoder
#   6  report:  loss curves and held-out mel distance -> RESULTS_<name>.md, report_<name>.png
set -euo pipefail

stage=0
stop_stage=100
clips=3600            # stage 0 makes them; stage 1 trains on the first $train_clips, stage 3 on all
heldout=40
test_clips=200        # more held-out clips, for benchmarks/codec.py (test_* shards)
threads=0
cache=""              # default: ~/.cache/burble/codec

preset() {
  case "$1" in
    mel-43hz) name=mel-43hz down_stages=1 channels=128,256 train_clips=3600 steps=7000 first_units=5
              favoured_books=2 favoured_share=0.5 dropout=0.3 default_books=2 decoder_units=5
              finetune_steps=4200 finetune_codebook=2048 finetune_share=0.7 finetune_dropout=0.2 refine_steps=1200
              refine_args="--lr 2e-4 --warmup 50 --favoured-books 2 --favoured-share 0.5 --asr-weight 5 --stoi-weight 3" ;;
    mel-21hz) name=mel-21hz down_stages=2 channels=128,192,256 train_clips=1200 steps=6000 first_units=2
              favoured_books="" favoured_share=0 dropout=0.6 default_books=4 refine_steps=7000 decoder_units=5
              finetune_steps=0 finetune_codebook=1024 finetune_share=0 finetune_dropout=0 refine_args="" ;;
    *) echo "run.sh: unknown preset $1 (mel-43hz or mel-21hz)" >&2; exit 2 ;;
  esac
}
preset mel-43hz

while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset "$2"; shift 2 ;;
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --clips) clips=$2; shift 2 ;;
    --train-clips) train_clips=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --test-clips) test_clips=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --refine-steps) refine_steps=$2; shift 2 ;;
    --finetune-steps) finetune_steps=$2; shift 2 ;;
    --decoder-units) decoder_units=$2; shift 2 ;;
    --down-stages) down_stages=$2; shift 2 ;;
    --channels) channels=$2; shift 2 ;;
    --default-books) default_books=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
exp=$cache/exp-$name
weights=$repo/burble/codecs/weights/$name.safetensors
vocoder=universal  # the codec decodes through the low-latency vocoder once stage 5 has made it
if [ -f "$repo/burble/codecs/vocoders/low-latency.safetensors" ]; then vocoder=low-latency; fi

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "stage 0: $clips training + $heldout held-out + $test_clips test Piper clips -> $cache/data"
  $PYTHON "$recipe_dir/local/prepare.py" --out-dir "$cache/data" --clips "$clips" --heldout "$heldout" \
    --test "$test_clips"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log "stage 1: train $name, $steps steps -> $exp"
  $PYTHON "$recipe_dir/local/train.py" --data-dir "$cache/data" --exp-dir "$exp" --steps "$steps" \
    --clips "$train_clips" --down-stages "$down_stages" --channels "$channels" --decoder-units "$first_units" \
    --favoured-books "$favoured_books" --favoured-share "$favoured_share" --dropout "$dropout" --threads "$threads"
  if [ "$finetune_steps" -gt 0 ]; then
    log "stage 1: fine-tune $name with books of $finetune_codebook, $finetune_steps steps -> $exp/finetune"
    $PYTHON "$recipe_dir/local/train.py" --data-dir "$cache/data" --exp-dir "$exp/finetune" --steps "$finetune_steps" \
      --clips "$train_clips" --down-stages "$down_stages" --channels "$channels" --decoder-units "$first_units" \
      --codebook-size "$finetune_codebook" --favoured-books "$favoured_books" --favoured-share "$finetune_share" \
      --dropout "$finetune_dropout" --lr 5e-4 --warmup 100 --init-from "$exp/checkpoint.pt" --threads "$threads"
  fi
fi
trained=$exp/checkpoint.pt
if [ "$finetune_steps" -gt 0 ]; then trained=$exp/finetune/checkpoint.pt; fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log "stage 2: export -> burble/codecs/weights/$name.safetensors"
  rm -rf "$exp/refine"  # a refinement belongs to the codec it started from
  $PYTHON "$recipe_dir/local/export.py" --checkpoint "$trained" --out "$weights" \
    --default-books "$default_books" --vocoder "$vocoder"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ] && [ "$refine_steps" -gt 0 ]; then
  log "stage 3: refine the decoder ($decoder_units units per rate, $refine_steps steps) -> $exp/refine"
  $PYTHON "$recipe_dir/local/refine_decoder.py" --data-dir "$cache/data" --exp-dir "$exp/refine" \
    --codec "$weights" --out "$weights" --units "$decoder_units" --steps "$refine_steps" --threads "$threads" \
    $refine_args
fi

if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  log "stage 4: distil the low-latency vocoder -> $cache/vocoder"
  $PYTHON "$recipe_dir/local/distill_vocoder.py" --data-dir "$cache/data" --exp-dir "$cache/vocoder" \
    --codec "$weights" --threads "$threads"
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  log "stage 5: export -> burble/codecs/vocoders/low-latency.safetensors (the vocoder of $name)"
  $PYTHON "$recipe_dir/local/export.py" --vocoder-checkpoint "$cache/vocoder/vocoder.pt" \
    --out "$repo/burble/codecs/vocoders/low-latency.safetensors" --codec "$weights"
fi

if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
  log "stage 6: report -> $recipe_dir/RESULTS_$name.md"
  $PYTHON "$recipe_dir/local/report.py" --exp-dir "$exp" --vocoder-dir "$cache/vocoder" --name "$name" \
    --out-dir "$recipe_dir"
fi
log "done"
