"""The zoo's text corpus (from ``pydoc_data``), its held-out split and the BPE tokenizer."""

from __future__ import annotations

import ast
import os
import sysconfig
from pathlib import Path

from pydoc_data import topics
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from actkit.zoo import HELDOUT_EVERY, MAX_HELDOUT_LINES, TOKENIZER_VOCAB, EOS


def build_corpus(path: str | os.PathLike, *, max_chars: int = 1_200_000) -> int:
    """Write the text corpus from the Python documentation that ships with CPython.

    Two sources, both under the PSF licence and present on every CPython installation:
    the language reference behind ``help('if')`` (``pydoc_data.topics``, sorted by topic),
    then the docstrings of the standard library's top-level modules (sorted by file name,
    parsed with :mod:`ast`, never imported). Each is cut into paragraphs, one per line,
    whitespace collapsed; lines under 40 characters and duplicates are dropped; the file
    stops at ``max_chars``. The zoo ships the result, so retraining does not depend on the
    local Python version.

    Returns
    -------
    n_lines : int
    """
    seen, lines, total = set(), [], 0

    def add(text: str) -> bool:
        nonlocal total
        for para in text.split("\n\n"):
            line = " ".join(para.split())
            if len(line) >= 40 and line not in seen:
                if total + len(line) + 1 > max_chars:
                    return False
                seen.add(line)
                lines.append(line)
                total += len(line) + 1
        return True

    texts = [topics.topics[key] for key in sorted(topics.topics)]
    for file in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    for text in texts:
        if not add(text):
            break
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def split_corpus(corpus: Path) -> tuple[list[str], list[str]]:
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    train = [ln for i, ln in enumerate(lines) if i % HELDOUT_EVERY != 0]
    heldout = [ln for i, ln in enumerate(lines) if i % HELDOUT_EVERY == 0][:MAX_HELDOUT_LINES]
    return train, heldout


def train_tokenizer(train_lines: list[str]):
    from transformers import PreTrainedTokenizerFast  # transformers: ~0.6 s at import (measured), not for `corpus`

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_lines, trainer=trainer)
    # like Pythia's: bos = eos = unk = <|endoftext|>, and NO pad token
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, model_max_length=128
    )
