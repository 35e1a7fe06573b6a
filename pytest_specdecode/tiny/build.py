"""Build tiny Llama checkpoints that vLLM (including its CPU backend) can load offline.

The trick that makes speculation measurable on a CPU: a *target* is a small model followed by
decoder layers whose ``o_proj`` and ``down_proj`` are zero. Those layers add nothing to the
residual stream, so the target computes exactly the same next-token function as the small model,
at many times the cost per step. A draft that *is* the small model then agrees with the target on
every token; a draft with other weights agrees on few.

Requires ``torch``, ``transformers`` and ``tokenizers`` (installed with vLLM).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

#: vLLM's CPU attention rejects small head sizes; 64 is accepted everywhere.
HEAD_DIM = 64

_WORDS = (
    "the a of to and in is it that was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how said "
    "an each she which do their time if will way about many then them write would like so these "
    "her long make thing see him two has look more day could go come did number sound no most "
    "people my over know water than call first who may down side been now find"
).split()


#: The tiny models' chat template. They are not chat models; the template gives conversations a
#: rendering (``prompts.chat``, ``Bench.conversation``): each message as ``role: content`` on a
#: line, then ``assistant:`` for the reply. A turn's prompt is a prefix of the next turn's.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def add_chat_template(folder: Path, template: str = CHAT_TEMPLATE) -> None:
    """Put ``template`` into the ``tokenizer_config.json`` of ``folder`` (where transformers
    and vLLM read it, and which every copy of the tiny tokenizer carries)."""
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (Path(folder) / "chat_template.jinja").unlink(missing_ok=True)


def build_tokenizer(out_dir: Path, texts: list[str], vocab_size: int = 512) -> None:
    """Train a byte-level BPE tokenizer on ``texts`` and save it as a Hugging Face tokenizer,
    with the tiny chat template (:data:`CHAT_TEMPLATE`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(str(out_dir))
    add_chat_template(out_dir)


def llama_config(
    num_layers: int,
    *,
    vocab_size: int = 512,
    hidden_size: int = 128,
    intermediate_size: int = 256,
    max_position_embeddings: int = 2048,
) -> Any:
    """A small ``LlamaConfig`` with head_dim 64 (vLLM's CPU attention needs it)."""
    from transformers import LlamaConfig

    heads = hidden_size // HEAD_DIM
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        dtype="float32",
    )


def pad_llama(src: Path, dst: Path, total_layers: int) -> Path:
    """Copy the Llama checkpoint in ``src`` to ``dst`` with zero-residual layers appended.

    The result has ``total_layers`` decoder layers and computes the same function as ``src``.
    Tokenizer files are copied unchanged. Returns ``dst``.
    """
    import torch
    from transformers import LlamaForCausalLM

    src, dst = Path(src), Path(dst)
    small = LlamaForCausalLM.from_pretrained(str(src), torch_dtype=torch.float32)
    n_src = small.config.num_hidden_layers
    if total_layers < n_src:
        raise ValueError(f"total_layers={total_layers} is fewer than the {n_src} layers in {src}")
    config = small.config
    config.num_hidden_layers = total_layers
    torch.manual_seed(1234)
    big = LlamaForCausalLM(config)
    state = big.state_dict()
    state.update({k: v.clone() for k, v in small.state_dict().items()})
    for i in range(n_src, total_layers):
        # Keep the random (non-zero) weights elsewhere so the layer costs real compute,
        # but zero the two projections that write into the residual stream.
        state[f"model.layers.{i}.self_attn.o_proj.weight"].zero_()
        state[f"model.layers.{i}.mlp.down_proj.weight"].zero_()
    big.load_state_dict(state)
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    big.save_pretrained(str(tmp))
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json",):
            shutil.copy2(f, tmp / f.name)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


def build_random_pair(
    out_dir: Path, *, target_layers: int = 16, seed: int = 0, extra_drafts: int = 0
) -> dict[str, Path]:
    """Build a random-weight draft and its padded target (same function, ``target_layers`` deep).

    ``extra_drafts`` adds drafts with other random weights (``other_draft_1``...), which agree
    with the target on almost no token. Returns a name → folder map. Deterministic for a seed.
    """
    import torch
    from transformers import LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    texts = [" ".join(rnd.choice(_WORDS) for _ in range(30)) for _ in range(300)]
    tok_dir = out_dir / "tokenizer"
    build_tokenizer(tok_dir, texts)

    def make_draft(name: str, draft_seed: int) -> Path:
        torch.manual_seed(draft_seed)
        model = LlamaForCausalLM(llama_config(1))
        with torch.no_grad():
            # Sharper logits than the default init, so greedy output is not a constant loop.
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(4.0)
        path = out_dir / name
        model.save_pretrained(str(path))
        for f in tok_dir.iterdir():
            shutil.copy2(f, path / f.name)
        return path

    paths = {"draft": make_draft("draft", seed)}
    for i in range(extra_drafts):
        paths[f"other_draft_{i + 1}"] = make_draft(f"other_draft_{i + 1}", seed + 1000 + i)
    paths["target"] = pad_llama(paths["draft"], out_dir / "target", target_layers)
    (out_dir / "pair.json").write_text(
        json.dumps({"seed": seed, "target_layers": target_layers}, indent=1)
    )
    return paths
