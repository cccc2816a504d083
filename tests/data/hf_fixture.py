#!/usr/bin/env python3
"""Writes the tokenizer fixtures of tests/data/test_hf_tokenizer.c with Hugging Face's
`tokenizers` (pip install tokenizers regex): the chunks GPT-2's and Llama 3's pre-tokenizer
regexes cut a multilingual text into (checked against GPT-2's own encoder.py split, the `regex`
module's findall, where both exist), two tiny byte-level BPE tokenizer.json files trained here
(GPT-2 style with merges as "a b" strings; Llama 3 style: Split + ByteLevel, ignore_merges,
merges as pairs, one vocabulary entry no merge reaches; Qwen2 style: the NFC normalizer, Qwen2's
Split regex, its chat special tokens, a normalized added token) and the ids `tokenizers` encodes
test texts to. Run: python3 tests/data/hf_fixture.py; it rewrites tests/data/fixtures/."""
import json
import os

import regex
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, trainers)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXTS = [
    "it’s the end—café au lait, isn't it? I'M HERE, they'LL see.",
    "東京は晴れ。北京欢迎你！ 서울특별시",
    "digits 12345678 ١٢٣٤ १२३ ๑๒๓ ½ and Ⅻ",
    "Привет, мир! Γειά σου κόσμε. שלום עולם",
    "naïve e\u0301 cafe\u0301 👍🏽 🇫🇷!!",
    "tabs\tand  two  spaces\n\n\nnew  \n lines   end   ",
    "nbsp\u00a0here, ideographic\u3000space, line\u2028sep",
]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# NFC at work: decomposed accents, Hangul jamo, the Angstrom sign, combining marks out of
# canonical order, a composition exclusion (U+0958 decomposes); special tokens cut the text
# before it is normalized (the e and its accent on either side of one stay apart); "cafe\u0301"
# matches the normalized added token "caf\u00e9" only after NFC, "<think>" (not normalized)
# matches the raw text; the normalized "end<" loses to the special token it overlaps, which
# is cut out first. tokenizers decodes a non-ASCII added token through the ByteLevel decoder
# (caf\u00e9 comes back as caf\ufffd); graphtrain decodes it to its content.
QWEN_CASES = TEXTS[:5] + [
    "\u1100\u1161\u11a8 \u212b A\u030a \u00c5 x\u0301\u0323 \u0958 \u0915\u093c \ufb01",
    "e<|endoftext|>\u0301 cafe\u0301s caf\u00e9<|im_end|>",
    "<|im_start|>user\nWhat's 12+34? Cafe\u0301 or cafe\u0301?<|im_end|>\n<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n46, cafe\u0301.<|im_end|><|endoftext|>",
    "the end<|im_end|> the end<b> ende<|endoftext|>",
    "tabs\tand  two  spaces\n\n\nnew  \n lines   end   ",
    "it\u2019s 2024\u20132025: \u00bd\u2153 \u0661\u0662 \u4e00\u4e8c\u4e09 \U0001f468\u200d\U0001f469\u200d\U0001f467",
]
def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def to_bytes(s, dec):
    return bytes(dec[c] for c in s)


def splits(pre, text, dec):
    return [to_bytes(piece, dec) for piece, _ in pre.pre_tokenize_str(text)]


def qwen_split():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False)])


def train(pre, ignore_merges, specials, normalizer=None, texts=TEXTS):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=420, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts * 3, trainer=tr)
    return tok


def main():
    os.makedirs(HERE, exist_ok=True)
    dec = byte_alphabet()
    gpt2_pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    llama_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    with open(os.path.join(HERE, "pretok_expected.txt"), "w") as f:
        f.write("# written by tests/data/hf_fixture.py: hex text, then its hex chunks\n")
        for name, pre, pat in [("gpt2", gpt2_pre, GPT2), ("llama3", llama_pre, LLAMA3),
                               ("qwen2", qwen_split(), QWEN2)]:
            for text in TEXTS:
                chunks = splits(pre, text, dec)
                ref = [m.encode() for m in regex.findall(pat, text)]
                if ref != chunks:
                    print("note: regex and tokenizers differ on", repr(text))
                f.write("%s %s\n" % (name, text.encode().hex()))
                f.write(" ".join(c.hex() for c in chunks) + "\n")

    gpt2 = train(gpt2_pre, False, ["<|endoftext|>"])
    j = json.loads(gpt2.to_str())
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]  # the older format
    gpt2 = Tokenizer.from_str(json.dumps(j))
    llama = train(llama_pre, True, ["<|begin_of_text|>", "<|end_of_text|>"])
    j = json.loads(llama.to_str())
    extra = "".join({b: c for c, b in dec.items()}[b] for b in "—café".encode())
    assert extra not in j["model"]["vocab"]
    j["model"]["vocab"][extra] = len(j["model"]["vocab"])  # reached only through ignore_merges
    llama = Tokenizer.from_str(json.dumps(j))
    qwen = train(qwen_split(), False, QWEN_SPECIALS, normalizers.NFC(), QWEN_CASES)
    qwen.add_tokens([AddedToken("caf\u00e9", normalized=True),
                     AddedToken("<think>", normalized=False), AddedToken("</think>", normalized=False),
                     AddedToken("end<", normalized=True)])
    cases = TEXTS + ["<|endoftext|>a<|endoftext|><|endoftext|> b", "<|begin_of_text|>end—café"
                     "<|end_of_text|>x<|end_of_text|"]
    with open(os.path.join(HERE, "hf_expected.txt"), "w") as f:
        f.write("# written by tests/data/hf_fixture.py: tokenizer, hex text, then the ids\n")
        for name, tok, texts in [("gpt2", gpt2, cases), ("llama3", llama, cases),
                                 ("qwen", qwen, QWEN_CASES)]:
            with open(os.path.join(HERE, "tok_%s.json" % name), "w") as out:
                out.write(tok.to_str())
            for text in texts:
                ids = tok.encode(text).ids
                f.write("%s %s\n%s\n" % (name, text.encode().hex(), " ".join(map(str, ids))))


if __name__ == "__main__":
    main()
