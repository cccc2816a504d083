"""bench/torch_reference.py compare --plot: from graphtrain and PyTorch bench JSONs it draws one
panel a workload with a bar a mode to scale, titled with the ratio of the best of each; a name
that is not *.svg is refused. Run by ctest (where python3 is found); needs no torch."""
import json
import os
import re
import subprocess
import sys
import tempfile

SRC = os.environ.get("GT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "bench", "torch_reference.py")


def run(args):
    return subprocess.run([sys.executable, SCRIPT, "compare"] + args, capture_output=True,
                          text=True, check=False)


def main():
    tmp = tempfile.mkdtemp(prefix="gt-compare-")
    gt = {"workload": "moe", "losses_identical": True, "modes": [
        {"mode": "eager", "ok": True, "median_ms": 20.0, "mfu": 0.2, "peak_ratio_to_eager": 1.0},
        {"mode": "attn", "ok": True, "median_ms": 19.0, "mfu": 0.2, "peak_ratio_to_eager": 1.0},
        {"mode": "attn+moe_router+moe_preprocess", "ok": True, "median_ms": 18.0, "mfu": 0.2,
         "peak_ratio_to_eager": 1.0},
        {"mode": "full_iteration", "ok": True, "median_ms": 16.0, "mfu": 0.25,
         "peak_ratio_to_eager": 1.0},
        {"mode": "broken", "ok": False, "median_ms": 1.0}]}
    pt = {"results": [{"workload": "moe", "mode": "eager", "median_ms": 48.0},
                      {"workload": "moe", "mode": "compile", "median_ms": 24.0},
                      {"workload": "moe", "mode": "te_attn", "error": "out of memory"}]}
    gpath, ppath = os.path.join(tmp, "gt.json"), os.path.join(tmp, "pt.json")
    with open(gpath, "w") as f:
        json.dump(gt, f)
    with open(ppath, "w") as f:
        json.dump(pt, f)
    svg_path = os.path.join(tmp, "c.svg")
    r = run(["--graphtrain", gpath, "--torch", ppath, "--plot", svg_path])
    assert r.returncode == 0, r.stderr
    assert "| moe | 20.00 | 19.00 | 18.00 | 16.00 |" in r.stdout, r.stdout
    svg = open(svg_path).read()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.endswith("</svg>\n")
    bars = re.findall(r'<rect class="(gt|pt)" x="[\d.]+" y="[\d.]+" width="([\d.]+)"', svg)
    kinds = [k for k, _ in bars]
    assert kinds == ["gt"] * 4 + ["pt"] * 2, kinds  # the failed modes draw nothing
    widths = [float(w) for _, w in bars]
    # one scale a panel: the slowest mode (PyTorch eager, 48 ms) is the full width
    assert abs(widths[5] / widths[4] - 24.0 / 48.0) < 1e-3, widths
    assert abs(widths[3] / widths[4] - 16.0 / 48.0) < 1e-3, widths
    title = ("moe: best PyTorch 24.00 ms (compile) / best graphtrain 16.00 ms (full_iteration)"
             " = 1.50x")
    assert title in svg, svg
    assert ">gt attn+mlp</text>" in svg and ">pt compile</text>" in svg
    os.remove(svg_path)

    bad = os.path.join(tmp, "c.png")
    r = run(["--graphtrain", gpath, "--torch", ppath, "--plot", bad])
    assert r.returncode == 2 and "*.svg" in r.stderr, (r.returncode, r.stderr)
    assert not os.path.exists(bad)
    for p in (gpath, ppath):
        os.remove(p)
    os.rmdir(tmp)
    print("test_compare_plot: 2 checks passed")


if __name__ == "__main__":
    main()
