#!/usr/bin/env bash
# `mpirun -np N graphtrain train` as a user runs it (ctest, with MPIEXEC and GT_BINARY set):
# rank 0 alone prints; a checkpoint of 2 ranks resumes at 1 and then at 4 with the losses of
# an uninterrupted run, bit for bit (the metrics file keeps every float's digits); SIGTERM
# to one rank, or Ctrl-C to mpirun, stops every rank after the same step with one checkpoint;
# one process with ddp.force_collectives has the 4 ranks' losses; `graphtrain bench` at 2
# ranks reports the communication; a rank killed outright ends the job with an error, not a
# hang.
set -u
MPI="${MPIEXEC:?set MPIEXEC} --oversubscribe"
BIN="${GT_BINARY:?set GT_BINARY}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
ARGS="runtime.device=cpu model.num_layers=1 model.hidden_size=32 model.num_attention_heads=2
model.num_query_groups=2 model.ffn_hidden_size=64 model.vocab_size=64 model.seq_length=16
train.micro_batch_size=2 train.global_batch_size=8 model.hidden_dropout=0.1
model.cuda_graph_impl=none logger.log_interval=1 train.train_iters=6"
fail() { echo "FAIL: $*"; exit 1; }
# the loss of each step in a metrics file, "step loss" a line
losses() { sed -n 's/.*"step": *\([0-9]*\).*"loss": *\([^,}]*\).*/\1 \2/p' "$@"; }

# one uninterrupted run at 4 ranks: the reference
$MPI -np 4 "$BIN" train $ARGS logger.metrics_file="$DIR/whole.jsonl" > "$DIR/whole.out" 2>&1 ||
    fail "4 ranks: $(tail -5 "$DIR/whole.out")"
[ "$(grep -c '^world: 4 ranks' "$DIR/whole.out")" = 1 ] || fail "the world is not printed once"
[ "$(grep -c '^step ' "$DIR/whole.out")" = 6 ] || fail "not one progress line a step (rank 0 alone)"

# ddp.force_collectives: one process without a launcher through a communicator of one, the
# losses of the 4 ranks bit for bit (the rank-order sums do not depend on the world size)
"$BIN" train $ARGS ddp.force_collectives=true logger.metrics_file="$DIR/forced.jsonl" \
    > "$DIR/forced.out" 2>&1 || fail "force_collectives: $(tail -5 "$DIR/forced.out")"
grep -q '^world: 1 rank on 1 node' "$DIR/forced.out" || fail "force_collectives: no world of one"
[ "$(losses "$DIR/forced.jsonl")" = "$(losses "$DIR/whole.jsonl")" ] ||
    fail "force_collectives: the losses differ from the 4 ranks'"

# 2 ranks for steps 1-2, 1 rank for 3-4, 4 ranks for 5-6, through one checkpoint folder; the
# 2 and 4 ranks shard the optimizer state (its checkpoint is the one-process format, and the
# distributed optimizer steps the replicated one's bits)
CK="checkpoint.save=$DIR/ck checkpoint.load=$DIR/ck"
DO="optimizer.use_distributed_optimizer=true ddp.bucket_size=1000"
$MPI -np 2 "$BIN" train $ARGS $CK $DO train.exit_interval=2 logger.metrics_file="$DIR/a.jsonl" \
    > "$DIR/a.out" 2>&1 || fail "2 ranks: $(tail -5 "$DIR/a.out")"
$MPI -np 1 "$BIN" train $ARGS $CK train.exit_interval=4 logger.metrics_file="$DIR/b.jsonl" \
    > "$DIR/b.out" 2>&1 || fail "1 rank: $(tail -5 "$DIR/b.out")"
grep -q "resumed from .* at step 2" "$DIR/b.out" || fail "1 rank did not resume at step 2"
$MPI -np 4 "$BIN" train $ARGS $CK $DO logger.metrics_file="$DIR/c.jsonl" > "$DIR/c.out" 2>&1 ||
    fail "4 ranks resumed: $(tail -5 "$DIR/c.out")"
losses "$DIR/whole.jsonl" > "$DIR/whole.txt"
losses "$DIR/a.jsonl" "$DIR/b.jsonl" "$DIR/c.jsonl" > "$DIR/pieces.txt"
[ "$(wc -l < "$DIR/whole.txt")" = 6 ] || fail "the reference has no 6 losses"
diff "$DIR/whole.txt" "$DIR/pieces.txt" || fail "2 -> 1 -> 4 ranks differ from one 4-rank run"

# `graphtrain bench` at 2 ranks: rank 0 alone reports, with the measured communication
$MPI -np 2 "$BIN" bench $ARGS --modes eager --steps 2 --warmup 1 --quiet --json "$DIR/bench.json" \
    > "$DIR/bench.out" 2>&1 || fail "bench at 2 ranks: $(tail -5 "$DIR/bench.out")"
[ "$(grep -c '^data parallel eager: 2 ranks' "$DIR/bench.out")" = 1 ] ||
    fail "bench at 2 ranks: no one data-parallel line: $(tail -5 "$DIR/bench.out")"
for k in '"ranks": *2' '"tokens_per_s_per_gpu"' '"comm_ms"' '"compute_ms"' '"hidden_fraction"'; do
    grep -q "$k" "$DIR/bench.json" || fail "bench at 2 ranks: the JSON has no $k"
done

# the rank-1 process of the job tagged $1
rank1_pid() {
    local p
    for p in /proc/[0-9]*; do
        if grep -qzx "GT_DP_TEST_TAG=$1" "$p/environ" 2>/dev/null &&
            grep -qzx "OMPI_COMM_WORLD_RANK=1" "$p/environ" 2>/dev/null; then
            echo "${p#/proc/}"
            return
        fi
    done
}
# starts a long job tagged $1 into $2, waits for its third step; sets JOB and VICTIM
start_long_job() {
    GT_DP_TEST_TAG=$1 $MPI -np 2 -x GT_DP_TEST_TAG "$BIN" train $ARGS train.train_iters=100000 \
        checkpoint.save="$DIR/$1" > "$2" 2>&1 &
    JOB=$!
    for _ in $(seq 600); do
        grep -q '^step *3/' "$2" 2>/dev/null && break
        sleep 0.1
    done
    VICTIM=$(rank1_pid "$1")
    [ -n "$VICTIM" ] || fail "$1: no rank 1 found"
}

# SIGTERM to rank 1 alone: every rank stops after the same step, rank 0 saves once
start_long_job term "$DIR/term.out"
kill -TERM "$VICTIM"
timeout 60 tail --pid=$JOB -f /dev/null || fail "SIGTERM to one rank: the job did not end in 60 s"
wait $JOB
grep -q "interrupted by SIGTERM: stopped after step [0-9]*, checkpoint saved" "$DIR/term.out" ||
    fail "SIGTERM: $(tail -5 "$DIR/term.out")"
step=$(sed -n 's/.*stopped after step \([0-9]*\).*/\1/p' "$DIR/term.out")
[ "$(cat "$DIR/term/latest_checkpointed_iteration.txt")" = "$step" ] || fail "no checkpoint of step $step"

# Ctrl-C to mpirun (Open MPI sends SIGTERM to every rank): one checkpoint, of the last step
start_long_job ctrlc "$DIR/ctrlc.out"
kill -INT $JOB
timeout 60 tail --pid=$JOB -f /dev/null || fail "Ctrl-C to mpirun: the job did not end in 60 s"
wait $JOB
grep -q "stopped after step [0-9]*, checkpoint saved" "$DIR/ctrlc.out" ||
    fail "Ctrl-C: $(tail -5 "$DIR/ctrlc.out")"
step=$(sed -n 's/.*stopped after step \([0-9]*\).*/\1/p' "$DIR/ctrlc.out")
[ "$(cat "$DIR/ctrlc/latest_checkpointed_iteration.txt")" = "$step" ] || fail "Ctrl-C: no checkpoint of step $step"

# a rank killed outright: the job ends with an error within 60 s
start_long_job kill "$DIR/kill.out"
start=$(date +%s)
kill -KILL "$VICTIM"
timeout 60 tail --pid=$JOB -f /dev/null || fail "a killed rank left the job hanging for 60 s"
wait $JOB && fail "a killed rank, and the job reported success"
echo "the job ended $(($(date +%s) - start)) s after rank 1 was killed"
echo PASS
