"""Model and tokenizer loading: the seeded tiny model, load checks that fail fast, loaders.

`resolve_model_path` turns `model.path` into something `from_pretrained` can load. For "tiny"
it builds a small causal LM with a byte-level tokenizer (no download, any text round-trips) and
saves it under the cache directory keyed by a hash of its config and seed, so every actor that
resolves the same config loads identical weights. For anything else it checks, in seconds,
that the path or hub id really holds a causal LM and a tokenizer, and says what it tried if not.

The tiny model is a Qwen3 (the Qwen2 decoder plus q/k norms) rather than a Qwen2: transformers
ignores the `tokenizer_class` a checkpoint declares for model_type "qwen2" and always loads
`Qwen2Tokenizer`, which would silently pair the byte-level model with the wrong vocabulary.

A model may also live at a URI (`s3://...`): a `model.path` in a bucket, or the warm-started
model a run with an `s3://` `run.output_dir` writes there. Nodes share no file system, so every
loader takes the URI and `local_model` downloads it once per machine into the cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import torch

from rlrun.config import ModelConfig, TinyModelConfig
from rlrun.errors import InputError, first_line

if TYPE_CHECKING:
    from transformers import PretrainedConfig, Qwen3Config

TINY = "tiny"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Bumped when the tiny model's construction changes, so old cache entries are not reused.
_TINY_FORMAT = 1
_TINY_FILES = ("config.json", "model.safetensors", "tokenizer_config.json")


class ModelLoadError(InputError):
    """A model or tokenizer named in the config cannot be loaded."""


def model_cache_dir() -> str:
    """Where built and downloaded models are kept on this machine ($RLRUN_CACHE)."""
    return os.environ.get("RLRUN_CACHE", os.path.join(Path.home(), ".cache", "rlrun", "models"))


def share_model(path: str, uri: str) -> str:
    """The model directory `path` (on this machine only: the tiny model, a local model.path)
    copied to `uri` for machines that share no file system with this one; once: a copy
    already there (a resumed run) is taken as it is. Returns `uri`."""
    from rlrun.checkpoint import is_file, join, writable

    if not is_file(join(uri, "config.json")):
        with writable(uri) as local:
            shutil.copytree(path, local, dirs_exist_ok=True)
    return uri


def local_model(path: str) -> str:
    """`path` as transformers and vLLM load it: a URI's files downloaded into the cache
    directory (once per machine and content: the key hashes every file's name, size and
    modification time, so a model rewritten at the same URI is fetched again), anything else
    as it is. A download lands in a scratch directory renamed into place when whole, so
    actors of one node racing for the same model never read a half-written one."""
    from rlrun.checkpoint import is_uri

    if not is_uri(path):
        return path
    import pyarrow.fs

    try:
        fs, root = pyarrow.fs.FileSystem.from_uri(path)
        files = [f for f in fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True))
                 if f.type == pyarrow.fs.FileType.File]
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"model {path!r} cannot be listed ({first_line(err)})") from None
    if not files:
        raise ModelLoadError(f"model {path!r}: nothing is stored there")
    listing = sorted((f.path, f.size, str(f.mtime)) for f in files)
    key = hashlib.sha256(json.dumps([path, listing]).encode()).hexdigest()[:16]
    target = Path(model_cache_dir(), f"remote-{key}")
    if target.is_dir():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        pyarrow.fs.copy_files(root, str(scratch), source_filesystem=fs)
        os.rename(scratch, target)
    except OSError:
        if not target.is_dir():  # not a peer that finished first: a real failure
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return str(target)


def resolve_model_path(cfg: ModelConfig, cache_dir: str, seed: int = 0) -> str:
    """A path or hub id that `load_causal_lm` and `load_tokenizer` can load; `seed` (callers
    pass `run.seed`) only seeds the tiny model's weights."""
    if cfg.path == TINY:
        if cfg.tokenizer is not None:
            raise ModelLoadError(
                f"model.tokenizer={cfg.tokenizer!r} cannot be combined with model.path=tiny: the "
                "tiny model brings its own byte-level tokenizer (set model.tokenizer=null)"
            )
        return build_tiny_model(cfg, cache_dir, seed)
    check_loadable(cfg.path, cfg.tokenizer)
    return cfg.path


def tiny_model_dir(cfg: ModelConfig, cache_dir: str, seed: int = 0) -> Path:
    key = json.dumps({"tiny": asdict(cfg.tiny), "seed": seed, "format": _TINY_FORMAT},
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(cache_dir) / f"tiny-{digest}"


def _tiny_tokenizer() -> Any:
    from transformers import ByT5Tokenizer

    # No <extra_id_*> sentinels: they are for T5 span corruption and would only widen the vocab.
    return ByT5Tokenizer(extra_ids=0)


def tiny_config(tiny: TinyModelConfig) -> Qwen3Config:
    """The transformers config (a `Qwen3Config`) of the tiny model `build_tiny_model` builds
    for `model.tiny`: the byte tokenizer's vocabulary and tied embeddings."""
    from transformers import Qwen3Config

    if tiny.hidden_size % tiny.num_heads:
        raise ModelLoadError(
            f"model.tiny.hidden_size={tiny.hidden_size} must be a multiple of "
            f"model.tiny.num_heads={tiny.num_heads}"
        )
    tokenizer = _tiny_tokenizer()
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=tiny.hidden_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_heads,
        head_dim=tiny.hidden_size // tiny.num_heads,
        intermediate_size=tiny.intermediate_size,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tokenizer_class=type(tokenizer).__name__,
    )


def build_tiny_model(cfg: ModelConfig, cache_dir: str, seed: int = 0) -> str:
    """Build (once) and save the tiny model and its tokenizer; return the directory."""
    from transformers import Qwen3ForCausalLM

    target = tiny_model_dir(cfg, cache_dir, seed)
    if all((target / name).is_file() for name in _TINY_FILES):
        return str(target)
    config = tiny_config(cfg.tiny)
    tokenizer = _tiny_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id

    # Build in a sibling temp dir and rename, so concurrent builders (several actors starting at
    # once) never see a half-written model; the loser of the race discards its copy.
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        try:
            os.rename(scratch, target)
        except OSError:
            if not all((target / name).is_file() for name in _TINY_FILES):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return str(target)


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.exists(path)


def _offline() -> bool:
    return any(
        os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _reachable(url: str, timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the URL's host opens; huggingface_hub itself retries an
    unreachable hub for about 20 s before giving up."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname or "", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _from_pretrained(loader: Any, path: str, key: str, what: str) -> Any:
    """`loader.from_pretrained(path)`, trying a local directory, then the Hugging Face cache,
    then the hub only when it answers, so a bad path fails in seconds with what was tried."""
    if _looks_local(path):
        local = Path(path).expanduser()
        if not local.is_dir():
            raise ModelLoadError(f"{key}={path!r}: local directory {local} does not exist")
        try:
            return loader.from_pretrained(str(local))
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ModelLoadError(
                f"{key}={path!r}: cannot load the {what} from {local} ({first_line(err)}; "
                "expected a directory written by save_pretrained)"
            ) from None
    try:
        return loader.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        pass
    if _offline():
        raise ModelLoadError(
            f"{key}={path!r}: not a local directory and its {what} is not in the Hugging Face "
            "cache, and HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set so the hub was not "
            f"tried (download it first, or point {key} at a local directory)"
        )
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    if not _reachable(endpoint):
        raise ModelLoadError(
            f"{key}={path!r}: not a local directory and its {what} is not in the Hugging Face "
            f"cache, and the hub ({endpoint}) cannot be reached from this machine (download the "
            f"model where there is network and copy it here, or point {key} at a local directory)"
        )
    try:
        return loader.from_pretrained(path)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ModelLoadError(
            f"{key}={path!r}: not a local directory, not in the Hugging Face cache, and the hub "
            f"did not provide its {what} ({first_line(err)}); check the id, or HF_TOKEN for "
            "gated models"
        ) from None


def pretrained_config(path: str) -> PretrainedConfig:
    """The transformers config of the model at `path` (`AutoConfig`): from a local directory, the
    Hugging Face cache, or the hub when it answers; a one-line ModelLoadError otherwise."""
    from transformers import AutoConfig

    return _from_pretrained(AutoConfig, path, "model.path", "config")


def check_loadable(path: str, tokenizer: str | None = None) -> None:
    """Fail with one clear message unless `path` is a causal LM and its tokenizer loads."""
    from transformers import AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    path, tokenizer = local_model(path), tokenizer and local_model(tokenizer)

    config = pretrained_config(path)
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        archs = ", ".join(getattr(config, "architectures", None) or []) or "none listed"
        raise ModelLoadError(
            f"model.path={path!r} is a {config.model_type!r} model (architectures: {archs}), not "
            "a causal language model that AutoModelForCausalLM can load"
        )
    if _looks_local(path):
        local = Path(path).expanduser()
        if not any(local.glob("*.safetensors")) and not any(local.glob("pytorch_model*.bin")):
            raise ModelLoadError(
                f"model.path={path!r}: {local} has a config but no weights (*.safetensors or "
                "pytorch_model*.bin)"
            )
        _check_safetensors(path, local)
    key = "model.tokenizer" if tokenizer else "model.path"
    _from_pretrained(AutoTokenizer, tokenizer or path, key, "tokenizer")


def _check_safetensors(path: str, local: Path) -> None:
    """Every *.safetensors file's header and size, read without loading a tensor: a truncated
    or corrupt file fails here, before any actor starts, not in every actor that loads it."""
    from safetensors import SafetensorError, safe_open

    for file in sorted(local.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as err:
            raise ModelLoadError(
                f"model.path={path!r}: weights file {file.name} is unreadable ({first_line(err)})"
            ) from None


def load_tokenizer(path: str) -> Any:
    """The tokenizer at `path`, padding on the left (generation appends on the right)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(local_model(path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    path: str, dtype: str = "float32", attention: str | None = None
) -> torch.nn.Module:
    """The causal LM at `path` in `dtype`, on CPU, in eval mode; `attention` names the
    attention kernel (transformers' `attn_implementation`; None: its default)."""
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ModelLoadError(f"model.dtype={dtype!r}: choose one of {', '.join(DTYPES)}")
    extra = {"attn_implementation": attention} if attention else {}
    model = AutoModelForCausalLM.from_pretrained(local_model(path), dtype=DTYPES[dtype], **extra)
    return model.eval()


def state_dict_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Name and shape of every entry in the state dict of the model at `path` (what an
    engine's `load_weights` expects), without allocating its weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(local_model(path))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}
