"""logger.tensorboard_dir: TensorBoard's own reader (event_accumulator) reads graphtrain's event
files back, with the values of the metrics file, and after a resume it keeps each step once.
Run by ctest where python3 is found; skipped (exit 77) where the tensorboard package is not
importable (pip install tensorboard)."""
import glob
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
TINY = ["runtime.device=cpu", "model.num_layers=1", "model.hidden_size=32",
        "model.num_attention_heads=2", "model.ffn_hidden_size=64", "model.vocab_size=64",
        "model.seq_length=16", "train.micro_batch_size=2", "train.global_batch_size=2",
        "logger.log_interval=1"]
TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
        "throughput/tokens_per_s": "tokens_per_s", "throughput/tflops": "tflops",
        "memory/peak_bytes": "peak_bytes"}


def train(binary, args):
    r = subprocess.run([binary, "train"] + TINY + args, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def scalars(tb_dir):
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main():
    binary = os.environ.get("GT_BINARY")
    if not binary:
        print("skipped: GT_BINARY (the graphtrain binary) is not set; run through ctest")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="gt-tb-")
    tb, metrics, ckpt = (os.path.join(tmp, n) for n in ("tb", "m.jsonl", "ckpt"))
    # decay steps of their own, so a resume with more train_iters keeps the schedule
    out = ["logger.tensorboard_dir=" + tb, "logger.metrics_file=" + metrics,
           "scheduler.lr_decay_iters=100"]
    train(binary, out + ["train.train_iters=3", "checkpoint.save=" + ckpt])
    # steps 4-6, then the same steps again from the step-3 checkpoint (a rerun after a crash)
    train(binary, out + ["train.train_iters=6", "checkpoint.load=" + ckpt])
    train(binary, out + ["train.train_iters=6", "checkpoint.load=" + ckpt])
    assert len(glob.glob(os.path.join(tb, "events.out.tfevents.*"))) == 3
    got = scalars(tb)
    assert set(TAGS) <= set(got), sorted(got)
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    steps = {r["step"]: r for r in records if "step" in r and "eval_loss" not in r}
    assert sorted(steps) == [1, 2, 3, 4, 5, 6], sorted(steps)
    for tag, key in TAGS.items():
        assert [s for s, _ in got[tag]] == [1, 2, 3, 4, 5, 6], (tag, got[tag])
        for step, value in got[tag]:
            want = steps[step][key]
            assert abs(value - want) <= 1e-6 * abs(want), (tag, step, value, want)
    print("tensorboard's reader: %d tags, steps 1-6 once each, values equal the metrics file"
          % len(TAGS))
    return 0


if __name__ == "__main__":
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print("skipped: the tensorboard Python package is not importable (%s); "
              "pip install tensorboard to run this check" % e)
        sys.exit(SKIP)
    sys.exit(main())
