"""scripts/gpu.sh, the one GPU entry point: each subcommand it lists has its file, an unknown one
is refused, the shared environment unpacks the carried pack and puts its libraries first, and
`ab` unpacks an older build's pack and says whether each variant's losses are bitwise those of
the first. Runs without a GPU (fake binaries print bench's output); run by ctest."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(os.environ.get("GT_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
GPU_SH = os.path.join(SRC, "scripts", "gpu.sh")

FAKE_BENCH = """#!/bin/sh
# prints what graphtrain bench prints: a mode line and the loss table
echo "mode  median"
echo "full_iteration {ms} {ms}"
echo "losses, first 2 steps:"
echo "step   full_iteration"
echo "1      {l1}"
echo "2      2.25"
echo "losses bitwise identical across modes over the first 2 steps: yes"
"""


def run(args, cwd=SRC, env=None):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def fake_binary(path, ms, l1):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(FAKE_BENCH.format(ms=ms, l1=l1))
    os.chmod(path, 0o755)


class GpuEntryPoint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gt-gpu-sh-")

    def scratch_root(self):
        """gpu.sh runs from the repository root and unpacks there: a copy of the scripts in a
        scratch root, so that a test never writes into the source tree."""
        root = os.path.join(self.tmp, "root")
        shutil.copytree(os.path.join(SRC, "scripts"), os.path.join(root, "scripts"))
        return root

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_every_listed_subcommand_has_its_file(self):
        out = run(["bash", GPU_SH, "help"])
        self.assertEqual(out.returncode, 0, out.stderr)
        names = re.findall(r"^  ([a-z][a-z-]*)\b", out.stdout, re.M)
        self.assertGreaterEqual(set(names), {"build", "check", "quick", "ab", "profile",
                                             "timeline", "ops", "ncu", "side-by-side"})
        for name in names:
            path = os.path.join(SRC, "scripts", "gpu", name.replace("-", "_") + ".sh")
            self.assertTrue(os.path.isfile(path), path)
            self.assertEqual(run(["bash", "-n", path]).returncode, 0, path)

    def test_unknown_subcommand_is_refused(self):
        out = run(["bash", GPU_SH, "chek"])
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown subcommand 'chek'", out.stderr)

    def test_env_unpacks_the_pack_and_puts_its_libraries_first(self):
        fake_binary(os.path.join(self.tmp, "stage", "build-gpu-run", "graphtrain"), 1, 1)
        os.makedirs(os.path.join(self.tmp, "build-gpu-pack"))
        subprocess.run(["tar", "-cJf", os.path.join(self.tmp, "build-gpu-pack", "run.tar.xz"),
                        "-C", os.path.join(self.tmp, "stage"), "build-gpu-run"], check=True)
        env = dict(os.environ, LD_LIBRARY_PATH="/old/lib")
        out = run(["bash", "-c", f"source {SRC}/scripts/gpu/env.sh && gpu_env && "
                   "echo \"$BUILD|$GT|$LD_LIBRARY_PATH|$GT_PY_LD_LIBRARY_PATH\""],
                  cwd=self.tmp, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        build, gt, ld, py_ld = out.stdout.strip().split("|")
        self.assertEqual(build, "build-gpu-run")
        self.assertTrue(os.access(gt, os.X_OK), gt)
        self.assertTrue(ld.startswith(os.path.join(self.tmp, "build-gpu-run", "lib")), ld)
        self.assertTrue(ld.endswith(":/old/lib"), ld)
        self.assertEqual(py_ld, "/old/lib")

    def test_ab_unpacks_an_older_pack_and_compares_losses(self):
        fake_binary(os.path.join(self.tmp, "new", "graphtrain"), 1.5, 2.5)
        fake_binary(os.path.join(self.tmp, "other", "graphtrain"), 1.7, 2.75)
        old = os.path.join(self.tmp, "oldstage")
        fake_binary(os.path.join(old, "build-gpu-run", "graphtrain"), 1.6, 2.5)
        pack = os.path.join(self.tmp, "old-pack", "run.tar.xz")
        os.makedirs(os.path.dirname(pack))
        subprocess.run(["tar", "-cJf", pack, "-C", old, "build-gpu-run"], check=True)
        root = self.scratch_root()
        out_dir = os.path.join(self.tmp, "out")
        env = dict(os.environ, OUT=out_dir, AB_WORKLOADS="tiny", AB_ROUNDS="1",
                   AB_VARIANTS=f"new||{self.tmp}/new/graphtrain|\n"
                               "old||ab-old/build-gpu-run/graphtrain|\n"
                               f"other||{self.tmp}/other/graphtrain|")
        out = run(["bash", os.path.join(root, "scripts", "gpu.sh"), "ab", f"old={pack}"],
                  cwd=root, env=env)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        with open(os.path.join(out_dir, "summary.txt")) as f:
            summary = f.read()
        self.assertTrue(os.access(os.path.join(root, "ab-old", "build-gpu-run", "graphtrain"),
                                  os.X_OK))
        lines = {l.split()[3]: l for l in summary.splitlines() if l.startswith("round 1 tiny")}
        self.assertIn("full_iteration 1.6 ms", lines["old"])
        self.assertIn("(bitwise = new)", lines["old"])
        self.assertIn("(DIFFER from new)", lines["other"])
        self.assertIn("losses differ from their workload's first variant: 1", summary)

    def test_ab_refuses_a_pack_that_is_not_name_equals_file(self):
        root = self.scratch_root()
        out = run(["bash", os.path.join(root, "scripts", "gpu.sh"), "ab",
                   os.path.join(self.tmp, "missing.tar.xz")], cwd=root,
                  env=dict(os.environ, OUT=os.path.join(self.tmp, "out"), AB_VARIANTS="a||x|"))
        self.assertEqual(out.returncode, 2)
        self.assertIn("is not NAME=PACK", out.stderr)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
