#!/usr/bin/env python3
"""Writes the Megatron indexed-dataset fixture of tests/data/test_indexed_dataset.c: two small
datasets in MMapIndexedDataset's layout (megatron/core/datasets/indexed_dataset.py,
_IndexWriter: header MMIDIDX\\0\\0, <Q version 1, <B dtype code, <Q sequence count,
<Q document count, int32 lengths, int64 byte pointers, int64 document indices) and the samples
Megatron's GPTDataset / BlendedDataset draw from them, built here with numpy.random.RandomState
exactly as gpt_dataset.py, helpers.cpp and blended_megatron_dataset_builder.py do.
Run: python3 tests/data/megatron_fixture.py  (needs numpy); it rewrites tests/data/fixtures/."""
import math
import os
import struct

import numpy

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CODES = {numpy.uint8: 1, numpy.int8: 2, numpy.int16: 3, numpy.int32: 4, numpy.int64: 5,
         numpy.float64: 6, numpy.float32: 7, numpy.uint16: 8}


def write_dataset(prefix, docs, dtype):
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(numpy.array(d, dtype=dtype).tobytes())
    lengths = [len(d) for d in docs]
    item = numpy.dtype(dtype).itemsize
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * item
    doc_indices = list(range(len(docs) + 1))  # one sequence per document, as preprocess_data
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_indices)))
        f.write(numpy.array(lengths, dtype=numpy.int32).tobytes())
        f.write(numpy.array(pointers, dtype=numpy.int64).tobytes())
        f.write(numpy.array(doc_indices, dtype=numpy.int64).tobytes())


def split_indices(split, n):
    w = numpy.array([float(x) for x in split.split(",")] + [0.0] * (3 - len(split.split(","))))
    w = (w / numpy.sum(w)).tolist()
    ends = [0.0]
    for x in w:
        ends.append(ends[-1] + x)
    out = []
    for i in range(3):
        if ends[i + 1] <= ends[i]:
            out.append(None)
        else:
            out.append(numpy.arange(int(round(ends[i] * float(n))), int(round(ends[i + 1] * float(n))),
                                    dtype=numpy.int32))
    return out


def build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch):
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_length
    out = [(0, 0)]
    di, off = 0, 0
    while len(out) <= num_samples:
        remaining = seq_length + 1
        while remaining != 0:
            doc_len = int(sizes[doc_idx[di]]) - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - 1
                remaining = 0
            else:
                di += 1
                off = 0
        out.append((di, off))
    return out


def doc_index(documents, num_epochs, rs, separate):
    if not separate or num_epochs == 1:
        d = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        d[:] = documents
        d = d.reshape(-1).astype(numpy.int32)
        rs.shuffle(d)
        return d
    return numpy.concatenate((doc_index(documents, num_epochs - 1, rs, False),
                              doc_index(documents, 1, rs, False)))


def shuffle_index(num_samples, total, rs):
    first = numpy.arange(0, num_samples, dtype=numpy.uint32)
    rs.shuffle(first)
    if num_samples == total:
        return first
    last = numpy.arange(num_samples, total, dtype=numpy.uint32)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


class GPT:
    def __init__(self, docs, indices, num_samples, seed, T):
        self.docs, self.T = docs, T
        sizes = numpy.array([len(d) for d in docs], dtype=numpy.int32)
        tokens = int(numpy.sum(sizes[indices]))
        epochs = 1
        if num_samples is not None:
            have = tokens
            while have < num_samples * T + 1:
                epochs += 1
                have += tokens
        separate = False
        if epochs > 1:
            sans = ((epochs - 1) * tokens - 1) // T
            per = (tokens - 1) // T
            separate = num_samples - sans < int(0.80 * per)
        rs = numpy.random.RandomState(seed)
        self.doc = doc_index(indices, epochs, rs, separate)
        self.sample = build_sample_idx(sizes, self.doc, T, epochs, tokens)
        n = len(self.sample) - 1
        self.shuffle = shuffle_index(sans if separate else n, n, rs)

    def __len__(self):
        return len(self.sample) - 1

    def __getitem__(self, i):
        j = self.shuffle[i]
        (b, bo), (e, eo) = self.sample[j], self.sample[j + 1]
        if b == e:
            return list(self.docs[self.doc[b]][bo:eo + 1])
        out = []
        for k in range(b, e + 1):
            off = bo if k == b else 0
            end = None if k < e else eo + 1
            out += list(self.docs[self.doc[k]][off:end])
        return out


def blend(weights, size):
    w = numpy.array(weights) / numpy.sum(weights)
    taken = [0] * len(w)
    src, smp = [], []
    for i in range(size):
        x = max(float(i), 1.0)
        errs = [w[k] * x - taken[k] for k in range(len(w))]
        best = int(numpy.argmax(errs))  # first of equal maxima, as the C++ loop's strict >
        src.append(best)
        smp.append(taken[best])
        taken[best] += 1
    return w, src, smp


def main():
    os.makedirs(HERE, exist_ok=True)
    rng = numpy.random.RandomState(42)
    docs_a = [list(rng.randint(0, 1000, size=rng.randint(1, 26))) for _ in range(20)]
    docs_b = [list(rng.randint(0, 1000, size=rng.randint(1, 40))) for _ in range(15)]
    write_dataset(os.path.join(HERE, "megatron_a"), docs_a, numpy.uint16)
    write_dataset(os.path.join(HERE, "megatron_b"), docs_b, numpy.int32)
    cases = []
    T = 8
    # name, prefixes, weights, split, which, num_samples, seed
    for name, split, which, n, seed in [("single_train", "80,15,5", 0, 60, 1234),
                                        ("single_valid", "80,15,5", 1, 7, 1234),
                                        ("single_one_epoch", "969,30,1", 0, None, 0)]:
        g = GPT(docs_a, split_indices(split, len(docs_a))[which], n, seed, T)
        cases.append((name, [g[i] for i in range(len(g))]))
    w, src, smp = blend([0.3, 0.7], 40)
    gs = []
    for k, docs in enumerate([docs_a, docs_b]):
        idx = split_indices("90,10", len(docs))[0]
        gs.append(GPT(docs, idx, int(math.ceil(math.ceil(40 * w[k]) * 1.005)), 7, T))
    cases.append(("blend_train", [gs[s][i] for s, i in zip(src, smp)]))
    with open(os.path.join(HERE, "megatron_expected.txt"), "w") as f:
        f.write("# written by tests/data/megatron_fixture.py; seq_length %d\n" % T)
        for name, samples in cases:
            f.write("case %s %d\n" % (name, len(samples)))
            for s in samples:
                assert len(s) == T + 1
                f.write(" ".join(str(int(t)) for t in s) + "\n")


if __name__ == "__main__":
    main()
