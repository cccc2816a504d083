#!/usr/bin/env bash
# The README's main command: installs what is missing and builds (scripts/setup.sh release),
# turns the fortunes corpus into token shards once (data/fortunes_*.bin, byte-level BPE with
# 512 tokens learned from the text, the last one the end-of-document token; vocabulary in
# data/fortunes.vocab, and data/fortunes.manifest, written last, saying the set is complete),
# then trains the demo recipe on them, shows the loss falling, and samples a few lines from
# the trained model (graphtrain generate). Extra key=value arguments are passed to train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release

FORTUNES_DIR=/usr/share/games/fortunes
PREFIX=data/fortunes
VOCAB=512 # must equal model.vocab_size of recipes/demo.yaml

# Training reads only a complete set: its manifest. Without one, whatever is there is an
# unfinished (or older) set, which --force replaces.
if [ ! -f "$PREFIX".manifest ]; then
  # the fortune files proper: no .dat index files, no .u8 links
  mapfile -t files < <(find -L "$FORTUNES_DIR" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
  if [ ${#files[@]} -eq 0 ]; then
    echo "run.sh: no fortune files in $FORTUNES_DIR; install them with: apt-get install fortunes" >&2
    exit 1
  fi
  mkdir -p data
  ./build/graphtrain prepare-data --input "${files[@]}" --output "$PREFIX" --vocab-size "$VOCAB" --force
else
  echo "run.sh: using the shard set $PREFIX.manifest (prepare-data --force ... to make it again)"
fi

# The demo recipe as written: 4 layers, d=128, seq 64, micro-batch 8, 300 steps with an eval
# every 100 (about half a minute on 2 CPU cores with the fp32 reference ops; seconds on a GPU).
# Each run.sh trains afresh: checkpoint.overwrite=true lets it replace the previous demo's
# checkpoints in runs/demo (without it a fresh run into a folder of checkpoints is refused).
./build/graphtrain train --recipe demo \
  dataset.data_path="$PREFIX" \
  checkpoint.save=runs/demo checkpoint.overwrite=true logger.metrics_file=runs/demo/metrics.jsonl \
  "$@"

# A few lines sampled from the model just trained (CPU; the prompt goes through the data's
# tokenizer, data/fortunes.vocab, which the checkpoint's dataset.data_path names)
echo "samples from runs/demo:"
for seed in 1 2 3; do
  ./build/graphtrain generate --checkpoint runs/demo --prompt "The " --max-new-tokens 40 \
    --temperature 0.8 --top-k 40 --seed "$seed"
done
