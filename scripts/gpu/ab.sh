# Sourced by scripts/gpu.sh: `scripts/gpu.sh ab [NAME=PACK ...]`, variants of graphtrain bench
# side by side in one call, so that they share the machine's state. Each line of AB_VARIANTS is
# "label|VAR=value ...|binary|extra args" (the settings may be empty; the binary relative to
# the repository, e.g. build-gpu-run/graphtrain), run on each workload of AB_WORKLOADS (default
# "tiny gpt124m llama1b moe") in AB_ROUNDS (default 1) interleaved rounds, with AB_MODES
# (default full_iteration) and AB_STEPS (default 30). Logs and summary.txt under $OUT (default
# /tmp/gt-ab).
# A second, older build: carry its pack (the build-gpu-pack/run.tar.xz of `scripts/gpu.sh build`
# or of the older gpu-build.sh, under another name) and give it as NAME=PACK (an
# argument, or a word of AB_PACKS); it is unpacked into ab-NAME/, so its binary is
# ab-NAME/build-gpu-run/graphtrain for the AB_VARIANTS lines. A pack that carries its recipes
# (build-gpu-run/recipes) runs them: GT_RECIPE_DIR points there unless the line sets it; one
# without (made before the recipes were packed) reads the tree's recipes/, so where those
# changed, carry the older recipes too and set GT_RECIPE_DIR=... in its line.
# Each line also says whether the variant's losses (bench's "losses, first N steps" table) are
# bitwise those of the first variant of its workload and round; the last line counts the
# variants whose losses differ.
# shellcheck shell=bash
gpu_env
OUT=${OUT:-/tmp/gt-ab}; mkdir -p "$OUT"
S=$OUT/summary.txt
: "${AB_VARIANTS:?set AB_VARIANTS to lines of label|env|binary|extra args}"
# shellcheck disable=SC2206 # AB_PACKS is a list of words on purpose
packs=("$@" ${AB_PACKS:-})
for spec in "${packs[@]}"; do
  name=${spec%%=*} file=${spec#*=}
  [ -d "$file" ] && file=$file/run.tar.xz
  if [ "$name" = "$spec" ] || [ ! -f "$file" ]; then
    echo "gpu.sh ab: '$spec' is not NAME=PACK with PACK a run.tar.xz (or its folder)" | tee -a "$S" >&2
    exit 2
  fi
  rm -rf "ab-$name"
  if ! { mkdir -p "ab-$name" && tar -xJf "$file" -C "ab-$name"; }; then
    echo "gpu.sh ab: could not unpack $file into ab-$name" | tee -a "$S" >&2
    exit 2
  fi
  echo "pack $name: $file -> ab-$name/$(ls "ab-$name")" | tee -a "$S"
done
gpu_header "$S"
differ=0
for round in $(seq 1 "${AB_ROUNDS:-1}"); do
  for w in ${AB_WORKLOADS:-tiny gpt124m llama1b moe}; do
    first="" first_label=""
    while IFS='|' read -r label envs bin args; do
      [ -z "$label" ] && continue
      log="$OUT/ab_${w}_${label}_r$round.log"
      bdir=$(dirname "$bin")
      [[ $bdir == /* ]] || bdir=$PWD/$bdir
      recipes=""
      if [ -d "$bdir/recipes" ] && [[ " $envs " != *" GT_RECIPE_DIR="* ]]; then
        recipes="GT_RECIPE_DIR=$bdir/recipes"
      fi
      # shellcheck disable=SC2086 # envs and args are word-split on purpose
      timeout 150 env $recipes $envs "$bin" bench --recipe "$w" --modes "${AB_MODES:-full_iteration}" --steps "${AB_STEPS:-30}" \
        --warmup 3 $args >"$log" 2>&1
      rc=$?
      # the loss table's rows (step, then one loss per mode), without its header of mode names
      losses=$(awk '/^losses, first/ {f = 1; next} /^losses bitwise/ {f = 0} f && /^[0-9]/' "$log")
      if [ -z "$losses" ]; then
        same="losses: none"
      else
        sum=$(printf '%s\n' "$losses" | md5sum | cut -c1-12)
        if [ -z "$first" ]; then
          first=$sum first_label=$label same="losses $sum"
        elif [ "$sum" = "$first" ]; then
          same="losses $sum (bitwise = $first_label)"
        else
          same="losses $sum (DIFFER from $first_label)" differ=$((differ + 1))
        fi
      fi
      echo "round $round $w $label rc=$rc $(grep -E '^(eager|full_iteration) ' "$log" | awk '{printf "%s %s ms (min %s)  ", $1, $2, $3}')$same" | tee -a "$S"
    done <<<"$AB_VARIANTS"
  done
done
echo "variants whose losses differ from their workload's first variant: $differ" | tee -a "$S"
