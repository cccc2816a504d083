"""The documentation matches the tree: every relative link of the repository's markdown files
resolves, every scripts/ or dev/ path the docs and the sources cite exists, docs/design.md names
every source folder, and nothing links the journal that left the tree. Run by ctest."""
import os
import re
import sys
import unittest

SRC = os.path.abspath(os.environ.get("GT_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
SKIP_DIRS = {".git", "tests/fuzz/corpus"}
CODE_EXT = (".c", ".h", ".cu", ".cuh", ".sh", ".py", ".md", ".txt", ".yaml")


def tree_files(exts):
    for root, dirs, files in os.walk(SRC):
        rel = os.path.relpath(root, SRC)
        dirs[:] = [d for d in dirs if not d.startswith("build") and
                   os.path.normpath(os.path.join(rel, d)) not in SKIP_DIRS and d != ".git"]
        for f in files:
            if f.endswith(exts) or f == "CMakeLists.txt":
                yield os.path.join(root, f)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class DocsMatchTheTree(unittest.TestCase):
    def test_markdown_links_resolve(self):
        bad = []
        for path in tree_files((".md",)):
            for target in re.findall(r"\]\(([^)\s]+)\)", read(path)):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                file = target.split("#")[0]
                if not os.path.exists(os.path.join(os.path.dirname(path), file)):
                    bad.append(f"{os.path.relpath(path, SRC)}: {target}")
        self.assertEqual(bad, [], "links to files that are not in the tree")

    def test_cited_scripts_and_dev_paths_exist(self):
        # a path such as scripts/gpu/env.sh or dev/cuda/own_vs_lt.cu, cited anywhere in the docs
        # or the sources, must name a file or folder of the tree (benchmarks/ snapshots record
        # the commands of their day and are left out)
        bad = []
        cite = re.compile(r"(?<![\w./-])((?:scripts|dev)/[\w./-]*[\w/])")
        for path in tree_files(CODE_EXT):
            rel = os.path.relpath(path, SRC)
            if rel.startswith("benchmarks" + os.sep):
                continue
            for cited in set(cite.findall(read(path))):
                if not os.path.exists(os.path.join(SRC, cited.rstrip("/"))):
                    bad.append(f"{rel}: {cited}")
        self.assertEqual(sorted(bad), [], "cited paths that are not in the tree")

    def test_design_doc_names_every_source_folder(self):
        design = read(os.path.join(SRC, "docs", "design.md"))
        folders = []
        for name in sorted(os.listdir(SRC)):
            full = os.path.join(SRC, name)
            if name.startswith((".", "build")) or not os.path.isdir(full) or name == "tests":
                continue
            if any(f.endswith((".c", ".cu", ".h")) for _, _, fs in os.walk(full) for f in fs):
                folders.append(name)
        missing = [f for f in folders if not re.search(r"(^|[\s`])" + f + "/", design, re.M)]
        self.assertEqual(missing, [], "source folders docs/design.md does not describe")

    def test_no_file_links_the_journal(self):
        self.assertFalse(os.path.exists(os.path.join(SRC, "docs", "experiments.md")))
        self.assertNotIn("experiments.md", read(os.path.join(SRC, "README.md")))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
