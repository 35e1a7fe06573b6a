"""Train the built-in tiny target and draft models (seeded, CPU only, a few minutes).

Usage::

    python -m pytest_specdecode.tiny.train --out pytest_specdecode/tiny/weights

writes ``target/`` and ``draft/`` (config, ``model.safetensors``, tokenizer) and ``training.json``
(seed, corpus sizes, steps, final losses, time taken). Reruns with the same seed, thread count and
torch version give the same weights.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdecode.tiny import corpus
from pytest_specdecode.tiny.build import build_tokenizer, llama_config

EOS_ID = 1


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


def _optimizer(model: Any, spec: ModelSpec) -> Any:
    """AdamW with weight decay on matrices only."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec.lr,
        betas=(0.9, 0.95),
    )


def _lr_at(spec: ModelSpec, step: int) -> float:
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
    opt = _optimizer(model, spec)
    usable = [s for s in starts if s + spec.long_seq_len + 1 <= len(stream)]
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(spec.steps):
        for g in opt.param_groups:
            g["lr"] = _lr_at(spec, step)
        seq_len = _seq_len_at(spec, step)
        rows = max(1, spec.batch_tokens // seq_len)
        batch = torch.stack([stream[s : s + seq_len] for s in rng.sample(usable, rows)])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, model)
        if step % 20 == 0 or step == spec.steps - 1:
            print(
                f"[{label}] step {step:4d}/{spec.steps} loss {losses[-1]:.3f} "
                f"({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
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


def train(out: Path, config: TrainConfig | None = None, threads: int = 2) -> dict[str, Any]:
    """Generate the corpus, train tokenizer, target and draft, and write them under ``out``."""
    import torch

    config = config or TrainConfig()
    torch.set_num_threads(threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    t0 = time.perf_counter()
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    docs = corpus.training_documents(config.documents, config.seed)
    tok_dir = tmp / "tokenizer"
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
    for offset, name in enumerate(("target", "draft")):
        spec: ModelSpec = getattr(config, name)
        model, info = _train_model(
            spec, config.vocab_size, stream, starts, config.seed + offset, name
        )
        model.save_pretrained(str(tmp / name))
        for f in tok_dir.iterdir():
            shutil.copy2(f, tmp / name / f.name)
        result[name] = info
    shutil.rmtree(tok_dir)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (tmp / "training.json").write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "weights")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    result = train(args.out, TrainConfig(seed=args.seed), threads=args.threads)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
