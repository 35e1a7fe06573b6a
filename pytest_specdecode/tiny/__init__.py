"""The built-in tiny CPU models: a trained target, two one-layer drafts sharing its tokenizer,
an EAGLE-3 head trained on its hidden states, and a MiMo target with one MTP layer.

>>> from pytest_specdecode.tiny import tiny_models
>>> models = tiny_models()      # pads the target on first use, into a cache folder
>>> models.target, models.draft  # folders vLLM can load (tokenizer included)
>>> models.weak_draft            # the draft's shape trained on 25 of its 700 steps: worse
>>> models.eagle3_head           # {"method": "eagle3", "model": str(models.eagle3_head)}
>>> models.mtp_target            # a target of its own, with {"method": "mtp"} (no "model")

The committed weights (``weights/target``, ``weights/draft``, ``weights/weak_draft``,
``weights/eagle3_head``) are small. On first use the target is copied with zero-residual layers
appended (see :func:`~.build.pad_llama`) up to :data:`TARGET_LAYERS` layers: it computes the
same tokens, at a cost per step that gives speculative decoding something to save on a CPU. The
MTP target is built on first use too, from a seed (:mod:`.mtp`; no committed weights). See
``MODEL_CARD.md``.

This module imports neither torch nor transformers until a model has to be built.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENGINE_KWARGS",
    "TARGET_LAYERS",
    "WEIGHTS_DIR",
    "TinyModels",
    "cache_root",
    "tiny_models",
]

#: Decoder layers of the padded target (the trained layers plus zero-residual ones).
TARGET_LAYERS = 24

#: ``vllm.LLM`` arguments for the tiny models on a CPU: eager mode starts in seconds (no graph
#: compilation), float32 as trained, a context of 512 tokens (raise it for long prompts).
ENGINE_KWARGS: dict[str, object] = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512}

#: Where the committed (unpadded) weights live.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

_CACHE_ENV = "PYTEST_SPECDECODE_CACHE"


@dataclass(frozen=True)
class TinyModels:
    """Folders of the tiny model pair, each loadable by vLLM and Hugging Face."""

    #: The padded target (:data:`TARGET_LAYERS` layers; same outputs as ``target_unpadded``).
    target: Path
    #: The one-layer draft model.
    draft: Path
    #: A one-layer draft trained far less: lower acceptance, for ranking proposers.
    weak_draft: Path
    #: The trained target without padding (cheap; same next-token function as ``target``).
    target_unpadded: Path
    #: A one-layer EAGLE-3 head for the target (``"method": "eagle3"``): it reads the target's
    #: states entering layers 1, 2 and 4, which the padding leaves as they are, so it fits
    #: ``target`` and ``target_unpadded`` alike. No tokenizer: vLLM uses the target's.
    eagle3_head: Path
    #: A MiMo target (Qwen2-shaped, :data:`.mtp.LAYERS` layers) with one MTP layer built to say
    #: what the target says next (:mod:`.mtp`), for ``{"method": "mtp"}`` with no ``model``: a
    #: target of its own, with the tiny tokenizer.
    mtp_target: Path


def weights_hash() -> str:
    """A short hash of the committed weights and the padding depth (names the cache folder)."""
    h = hashlib.sha256(f"layers={TARGET_LAYERS}".encode())
    for sub in ("target", "draft"):
        for f in sorted((WEIGHTS_DIR / sub).iterdir()):
            if f.is_file():
                h.update(f"{sub}/{f.name}".encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    """``$PYTEST_SPECDECODE_CACHE``, else ``~/.cache/pytest-specdecode``."""
    env = os.environ.get(_CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pytest-specdecode"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (advisory; a no-op where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


_PAD = (
    "import sys; from pytest_specdecode.tiny.build import pad_llama; "
    "pad_llama(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
)

_MTP = (
    "import sys; from pytest_specdecode.tiny.mtp import build_mtp_target; "
    "build_mtp_target(sys.argv[1], sys.argv[2])"
)


def _run_child(code: str, args: list[str], what: str) -> None:
    """Run ``code`` in a child process: torch and transformers stay out of the caller's
    process (a pytest run, whose in-process pytester runs would otherwise import and drop
    them)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")


def _pad(src: Path, dst: Path, layers: int) -> Path:
    """:func:`~.build.pad_llama` in a child process."""
    what = f"padding the tiny target {src} to {layers} layers into {dst}"
    _run_child(_PAD, [str(src), str(dst), str(layers)], what)
    return dst


def _build_mtp(src: Path, dst: Path) -> Path:
    """:func:`~.mtp.build_mtp_target` in a child process."""
    _run_child(_MTP, [str(src), str(dst)], f"building the tiny MTP target into {dst}")
    return dst


def _build(dst: Path, build: Callable[[Path], Path]) -> None:
    """Build a model folder into ``dst`` atomically (safe across processes): ``build(work)``
    writes it to ``work`` and returns it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dst.parent / f".{dst.name}.lock"):
        if _complete(dst):
            return
        work = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
        try:
            built = build(work / dst.name)
            if dst.exists():  # a stale, incomplete folder from an interrupted run
                shutil.rmtree(dst, ignore_errors=True)
            try:
                os.rename(built, dst)
            except OSError:
                if not _complete(dst):  # someone else finished first, or a real failure
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _build_target(dst: Path) -> None:
    """Pad the committed target into ``dst`` atomically (safe across processes)."""
    _build(dst, lambda work: _pad(WEIGHTS_DIR / "target", work, TARGET_LAYERS))


def tiny_models(cache_dir: Path | None = None) -> TinyModels:
    """The tiny models, building the padded target and the MTP target on first use.

    ``cache_dir`` is the root of the cache (default :func:`cache_root`); the padded target goes
    to ``<root>/tiny-<hash>/target``, where the hash covers the committed weights and
    :data:`TARGET_LAYERS`, so a change of either builds afresh; the MTP target to
    ``<root>/tiny-mtp-<hash>/target``, where the hash covers its builder (:mod:`.mtp`) and the
    tokenizer.
    """
    if not (WEIGHTS_DIR / "target" / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"tiny model weights are missing from {WEIGHTS_DIR}; "
            "run `python -m pytest_specdecode.tiny.train` to create them"
        )
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / f"tiny-{weights_hash()}" / "target"
    if not _complete(target):
        _build_target(target)
    from .mtp import mtp_hash  # no torch: the build runs in a child process

    mtp_target = root / f"tiny-mtp-{mtp_hash(WEIGHTS_DIR / 'target')}" / "target"
    if not _complete(mtp_target):
        _build(mtp_target, lambda work: _build_mtp(WEIGHTS_DIR / "target", work))
    return TinyModels(
        target=target,
        draft=WEIGHTS_DIR / "draft",
        weak_draft=WEIGHTS_DIR / "weak_draft",
        target_unpadded=WEIGHTS_DIR / "target",
        eagle3_head=WEIGHTS_DIR / "eagle3_head",
        mtp_target=mtp_target,
    )
