"""scripts/lint/layers.sh, the layer rule lint enforces: an include that points up a layer
(graphs/ including train/), a public header or API test reaching into the tree, each fails
naming the file and line; includes that point down, tests/ and dev/ pass. Run by ctest."""
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("GT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "scripts", "lint", "layers.sh")


def tree(files):
    root = tempfile.mkdtemp(prefix="gt-layers-")
    for path, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)
    return root


def lint(files):
    return subprocess.run(["bash", SCRIPT, tree(files)], capture_output=True, text=True,
                          check=False)


def expect(cond, what, res):
    if not cond:
        print(f"FAIL: {what}\nstdout: {res.stdout}\nstderr: {res.stderr}")
        sys.exit(1)


def main():
    down = {
        "graphs/runner.c": '#include "graphs/graphs.h"\n#include "model/model.h"\n'
                           '#include "backend/cuda/x.h"\n#include <stdio.h>\n',
        "backend/cuda/k.cu": '#include "backend/backend.h"\n#include "core/error.h"\n',
        "core/error.h": '#include "graphtrain.h"\n',
        "include/graphtrain.h": "#include <stdint.h>\n",
        "tests/graphs/test_x.c": '#include "train/trainer.h"\n',
        "tests/api/test_api.c": '#include "graphtrain.h"\n#include "testlib.h"\n',
        "cli/main.c": '#include "train/trainer.h"\n#include "bench/bench.h"\n',
    }
    res = lint(down)
    expect(res.returncode == 0, "includes that point down pass", res)

    up = dict(down)
    up["graphs/graphs.h"] = '#include <stdio.h>\n\n#include "train/trainer.h"\n'
    res = lint(up)
    expect(res.returncode == 1, "graphs/ including train/ fails", res)
    expect("graphs/graphs.h:3:" in res.stdout and '"train/trainer.h"' in res.stdout,
           "the violation names the file, line and header", res)

    cuda_up = dict(down)
    cuda_up["backend/cuda/k.cu"] = '#include "model/model.h"\n'
    res = lint(cuda_up)
    expect(res.returncode == 1 and "backend/cuda/k.cu:1:" in res.stdout,
           "backend/cuda counts as backend: including model/ fails", res)

    public = dict(down)
    public["include/graphtrain.h"] = '#include "core/error.h"\n'
    public["tests/api/test_api.c"] = '#include "train/trainer.h"\n'
    res = lint(public)
    expect(res.returncode == 1 and "include/graphtrain.h:1:" in res.stdout
           and "tests/api/test_api.c:1:" in res.stdout,
           "the public header and the API test may use graphtrain.h only", res)

    res = subprocess.run(["bash", SCRIPT, SRC], capture_output=True, text=True, check=False)
    expect(res.returncode == 0, "the repository itself keeps the layer order", res)
    print("ok")


if __name__ == "__main__":
    main()
