#!/usr/bin/env bash
# The prepared GPU training run (issues #3 and #10). On the machine it runs on it
#   1. builds the corpus from that machine's own Python sources (standard library without
#      tests + installed packages; `dg-engine corpus`), using its cores instead of carrying
#      tokens in, and
#   2. trains the bundled masked-diffusion model and the autoregressive baseline of the same
#      shape side by side on one GPU in bf16 for MINUTES, then
#   3. leaves in $OUT only what must come back: safetensors shards under 15 MB each plus one
#      tarball with configs, tokenizer, held-out files and logs (at most 8 files, < 64 MB).
#
#   OUT=/path scripts/gpu_train.sh [MINUTES]            # on the GPU machine (device tool)
#   TOY=1 OUT=/tmp/toy scripts/gpu_train.sh              # the 30-second CPU rehearsal
#   CORPUS=folder ...                                    # reuse a corpus instead of building
#   MULTI_HOLE_SHARE=0.5 ...                             # the masked run's infill rows with
#                                                        # 2-3 holes (dg-engine train option)
set -euo pipefail
MINUTES=${1:-6}
OUT=${OUT:?set OUT to the folder whose files come back}
WORK=${WORK:-/tmp/dg-train}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
STDLIB=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")

if [ "${TOY:-0}" = 1 ]; then
  CORPUS_ARGS=(--source "$STDLIB/json" --source "$STDLIB/email" --vocab-size 1024)
  SHAPE=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --batch 8 --seq-len 256
         --device cpu --threads 1)
  MINUTES=${TOY_MINUTES:-0.25}
else
  CORPUS_ARGS=(--vocab-size 8192 --max-mb 150 --tokenizer-mb 40)
  SHAPE=(--hidden 384 --layers 8 --heads 6 --kv-heads 2 --ffn 896 --batch 256 --seq-len 256
         --device cuda --precision bf16 --compile --lr 2e-3 --warmup-steps 200)
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
fi
"$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"

CORPUS=${CORPUS:-}
if [ -z "$CORPUS" ]; then
  CORPUS="$WORK/corpus"
  rm -rf "$CORPUS"
  start=$(date +%s)
  PYTHONPATH=. "$PY" -m engine.cli corpus --out "$CORPUS" "${CORPUS_ARGS[@]}" > "$WORK/corpus.log" 2>&1 \
    || { tail -n 30 "$WORK/corpus.log"; exit 1; }
  echo "corpus built in $(( $(date +%s) - start )) s"; tail -n 14 "$WORK/corpus.log"
fi

# Within BUDGET_S seconds in all (the device's per-command limit), training gets what the
# corpus left, minus RESERVE_S for start-up, compilation, the held-out loss and saving.
if [ -n "${BUDGET_S:-}" ]; then
  MINUTES=$("$PY" -c "print(round(max(0.5, min($MINUTES, ($BUDGET_S - ($(date +%s) - $T0) - ${RESERVE_S:-110}) / 60)), 2))")
fi
echo "training for $MINUTES minutes"

for objective in masked ar; do
  rm -rf "${WORK:?}/$objective"
  rows=()
  if [ "$objective" = masked ] && [ -n "${MULTI_HOLE_SHARE:-}" ]; then
    rows=(--multi-hole-share "$MULTI_HOLE_SHARE")
  fi
  PYTHONPATH=. "$PY" -m engine.cli train --objective "$objective" --data "$CORPUS" \
    --out "$WORK/$objective" --minutes "$MINUTES" --save-every-minutes 1000 "${SHAPE[@]}" \
    "${rows[@]}" > "$WORK/$objective.log" 2>&1 &
done

# Fail fast: a run that dies early must leave device minutes for a retry.
status=0
while [ -n "$(jobs -rp)" ]; do
  sleep 5
  for objective in masked ar; do
    if grep -q "Traceback" "$WORK/$objective.log"; then
      echo "$objective training failed:"; tail -n 30 "$WORK/$objective.log"
      kill $(jobs -rp) 2>/dev/null || true
      status=1
    fi
  done
  [ $status = 0 ] || break
done
wait
tail -n 3 "$WORK/masked.log" "$WORK/ar.log"

# Shards come back one file each; everything small travels in one tarball.
for objective in masked ar; do
  ls "$WORK/$objective"/model*.safetensors >/dev/null 2>&1 || { echo "no $objective checkpoint"; status=1; }
  for shard in "$WORK/$objective"/model*.safetensors; do
    [ -e "$shard" ] && cp "$shard" "$OUT/$objective-$(basename "$shard")"
  done
done
cp "$CORPUS"/{tokenizer.json,tokenizer_config.json,meta.json,files.txt,heldout.txt} "$WORK/" 2>/dev/null || true
[ -d "$CORPUS/heldout" ] && cp -r "$CORPUS/heldout" "$WORK/heldout"
tar -C "$WORK" -czf "$OUT/meta.tar.gz" \
  $(cd "$WORK" && ls -d masked/*.json ar/*.json ./*.log ./*.json ./*.txt heldout 2>/dev/null)
ls -la "$OUT"
exit $status
