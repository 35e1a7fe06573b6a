"""Train the built-in tiny target and drafts (seeded, CPU only, a few minutes).

Usage::

    python -m pytest_specdecode.tiny.train --out pytest_specdecode/tiny/weights
    python -m pytest_specdecode.tiny.train --only weak_draft   # keep target and draft

writes ``target/``, ``draft/`` and ``weak_draft/`` (config, ``model.safetensors``, tokenizer) and
``training.json`` (seeds, corpus sizes, steps, final losses, time taken, weight hashes). Reruns
with the same seed, thread count and torch version give the same weights: each model is seeded
with ``seed`` plus its place in :data:`MODELS`, so ``--only`` trains a model exactly as a full
run would, on the tokenizer already in ``out/target``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_specdecode.tiny import corpus
from pytest_specdecode.tiny.build import build_tokenizer, llama_config

EOS_ID = 1

#: The models a full run trains, in order (each one's seed is ``seed`` + its index).
MODELS = ("target", "draft", "weak_draft")


@dataclass(frozen=True)
class ModelSpec:
    """Shape and training schedule of one model."""

    layers: int
    hidden_size: int
    intermediate_size: int
    steps: int
    lr: float
    #: Tokens per step; every window starts at a document.
    batch_tokens: int = 8192
    #: The first ``short_frac`` of the steps use windows of ``short_seq_len`` tokens (about one
    #: document each): with few distractors in context, copying values from the prompt is
    #: learned within a few hundred steps instead of never.
    short_frac: float = 0.5
    short_seq_len: int = 128
    #: Then ``seq_len`` windows, with every ``long_every``-th step on ``long_seq_len`` windows
    #: so the model also learns positions up to the long-context prompts.
    seq_len: int = 256
    long_every: int = 4
    long_seq_len: int = 1024


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights."""

    seed: int = 0
    vocab_size: int = 1024
    documents: int = 24000
    tokenizer_documents: int = 6000
    target: ModelSpec = field(
        default_factory=lambda: ModelSpec(
            layers=4, hidden_size=128, intermediate_size=384, steps=500, lr=3e-3
        )
    )
    draft: ModelSpec = field(
        default_factory=lambda: ModelSpec(
            layers=1, hidden_size=128, intermediate_size=384, steps=700, lr=5e-3
        )
    )
    #: The draft's shape trained on 25 of its 700 steps: a worse proposer (lower acceptance,
    #: same cost per step), for ranking proposers.
    weak_draft: ModelSpec = field(
        default_factory=lambda: ModelSpec(
            layers=1, hidden_size=128, intermediate_size=384, steps=25, lr=5e-3
        )
    )


def _tokenizer_texts(docs: list[str]) -> list[str]:
    """Documents plus the record values as they appear inside JSON strings.

    The extra lines make BPE merge each name, city and item into one token in the form that both
    the prompts and the JSON use, so copying a value is copying a token.
    """
    names = [f"{a} {b}" for a, b in zip(corpus.FIRST_NAMES, corpus.LAST_NAMES, strict=False)]
    values = names + list(corpus.CITIES) + list(corpus.ITEMS)
    values += list(corpus.TIERS) + list(corpus.CLASSES) + list(corpus.WINDS) + list(corpus.SKY)
    line = " ".join(json.dumps(v) for v in values)
    return docs + [line] * 1500


def _tokenize(tok_dir: Path, docs: Sequence[str]) -> tuple[list[int], list[int]]:
    """The token stream (documents joined by EOS) and the offset where each document starts."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    stream: list[int] = []
    starts: list[int] = []
    for ids in tok(list(docs), add_special_tokens=False)["input_ids"]:
        starts.append(len(stream))
        stream.extend(ids)
        stream.append(EOS_ID)
    return stream, starts


class Schedule(Protocol):
    """What the optimizer and its learning-rate schedule read of a model's (or head's) spec."""

    @property
    def lr(self) -> float: ...
    @property
    def steps(self) -> int: ...


def optimizer(model: Any, spec: Schedule) -> Any:
    """AdamW with weight decay on matrices only."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec.lr,
        betas=(0.9, 0.95),
    )


def update(model: Any, opt: Any, loss: Any) -> float:
    """One optimizer step on ``loss`` (gradients clipped to norm 1); the loss's value."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.item())


def report_step(label: str, step: int, steps: int, loss: float, t0: float, more: str = "") -> None:
    """The progress line of every 20th step and the last."""
    if step % 20 == 0 or step == steps - 1:
        print(
            f"[{label}] step {step:4d}/{steps} loss {loss:.3f} {more}"
            f"({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )


def lr_at(spec: Schedule, step: int) -> float:
    """Linear warm-up over the first twelfth, then cosine decay to a tenth."""
    warmup = max(1, spec.steps // 12)
    if step < warmup:
        return spec.lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, spec.steps - warmup)
    return spec.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _seq_len_at(spec: ModelSpec, step: int) -> int:
    """Short windows first, then the usual length with a long window every ``long_every``."""
    if step < spec.short_frac * spec.steps:
        return spec.short_seq_len
    if spec.long_every > 0 and step % spec.long_every == spec.long_every - 1:
        return spec.long_seq_len
    return spec.seq_len


def _train_model(
    spec: ModelSpec,
    vocab_size: int,
    stream: Any,
    starts: list[int],
    seed: int,
    label: str,
    on_step: Callable[[int, Any], None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Train one Llama with AdamW on next-token loss over windows that begin at a document."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    config = llama_config(
        spec.layers,
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
    )
    model = LlamaForCausalLM(config)
    model.train()
    opt = optimizer(model, spec)
    usable = [s for s in starts if s + spec.long_seq_len + 1 <= len(stream)]
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(spec.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(spec, step)
        seq_len = _seq_len_at(spec, step)
        rows = max(1, spec.batch_tokens // seq_len)
        batch = torch.stack([stream[s : s + seq_len] for s in rng.sample(usable, rows)])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        losses.append(update(model, opt, loss))
        if on_step is not None:
            on_step(step, model)
        report_step(label, step, spec.steps, losses[-1], t0)
    model.eval()
    tail = losses[-10:]
    info = {
        **asdict(spec),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_seen": spec.steps * spec.batch_tokens,
        "final_loss": round(sum(tail) / len(tail), 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return model, info


def train(
    out: Path,
    config: TrainConfig | None = None,
    threads: int = 2,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Generate the corpus, train the tokenizer and every model of :data:`MODELS`, and write
    them under ``out``.

    ``only`` names the models to (re)train into an existing ``out``: the tokenizer is the one in
    ``out/target``, the other models stay, and ``training.json`` gets the new entries.
    """
    config = config or TrainConfig()
    names = tuple(only) if only else MODELS
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if only and not (Path(out) / "target" / "config.json").is_file():
        raise FileNotFoundError(
            f"{Path(out) / 'target'} holds no model; train every model first (without --only)"
        )

    import torch

    torch.set_num_threads(threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    t0 = time.perf_counter()
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    try:
        result = _train_into(tmp, out, config, names, threads, only=bool(only))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if only:
        _merge_into(out, tmp, names, result)
    else:
        (tmp / "training.json").write_text(json.dumps(result, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return result


def _train_into(
    tmp: Path, out: Path, config: TrainConfig, names: Sequence[str], threads: int, *, only: bool
) -> dict[str, Any]:
    """Corpus, tokenizer (``out/target``'s when ``only``) and the models ``names`` into ``tmp``;
    the record of the run."""
    import torch

    docs = corpus.training_documents(config.documents, config.seed)
    tok_dir = tmp / "tokenizer"
    if only:
        _copy_tokenizer(out / "target", tok_dir, config.vocab_size)
    else:
        build_tokenizer(
            tok_dir, _tokenizer_texts(docs[: config.tokenizer_documents]), config.vocab_size
        )
    ids, starts = _tokenize(tok_dir, docs)
    stream = torch.tensor(ids, dtype=torch.long)
    print(f"corpus: {len(docs)} documents, {len(ids)} tokens", flush=True)

    result: dict[str, Any] = {
        "seed": config.seed,
        "threads": threads,
        "torch": torch.__version__,
        "corpus": {
            "documents": len(docs),
            "tokens": len(ids),
            "characters": sum(len(d) for d in docs),
            "mix": corpus.TRAINING_MIX,
        },
        "vocab_size": config.vocab_size,
    }
    if only:
        _recorded(out, result)  # refused before training, not after
    for name in names:
        spec: ModelSpec = getattr(config, name)
        seed = config.seed + MODELS.index(name)
        model, info = _train_model(spec, config.vocab_size, stream, starts, seed, name)
        model.save_pretrained(str(tmp / name))
        for f in tok_dir.iterdir():
            shutil.copy2(f, tmp / name / f.name)
        result[name] = {"seed": seed, **info, "sha256": weights_sha256(tmp / name)}
    shutil.rmtree(tok_dir)
    return result


def weights_sha256(folder: Path) -> str:
    """The SHA-256 of a model folder's ``model.safetensors`` (recorded in ``training.json``)."""
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()


def _copy_tokenizer(src: Path, dst: Path, vocab_size: int) -> None:
    """Copy the tokenizer files of the model folder ``src`` into ``dst``."""
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    if vocab != vocab_size:
        raise ValueError(f"{src} has a vocabulary of {vocab} tokens, the config {vocab_size}")
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy2(f, dst / f.name)


def _recorded(out: Path, result: dict[str, Any]) -> dict[str, Any]:
    """``out/training.json`` (empty when missing), refused when it describes another corpus,
    seed or vocabulary than this run's: models trained with ``only`` join the others there."""
    record = out / "training.json"
    data: dict[str, Any] = json.loads(record.read_text()) if record.is_file() else {}
    for key in ("seed", "corpus", "vocab_size"):
        if key in data and data[key] != result[key]:
            raise ValueError(f"{record}: {key} is {data[key]!r}, this run's {result[key]!r}")
    return data


def _merge_into(out: Path, tmp: Path, names: Sequence[str], result: dict[str, Any]) -> None:
    """Move the models trained with ``only`` into ``out`` and add them to its
    ``training.json``."""
    data = _recorded(out, result)
    for name in names:
        shutil.rmtree(out / name, ignore_errors=True)
        (tmp / name).rename(out / name)
        data[name] = {**result[name], "threads": result["threads"], "torch": result["torch"]}
    (out / "training.json").write_text(json.dumps(data, indent=1) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "weights")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=MODELS,
        help="train only these models into an existing --out (its tokenizer, target kept)",
    )
    args = parser.parse_args(argv)
    result = train(args.out, TrainConfig(seed=args.seed), threads=args.threads, only=args.only)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
