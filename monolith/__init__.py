"""monolith: one persistent CUDA kernel per token for Qwen3-0.6B batch-1 decode.

The repository keeps the design card's top-level folders (bench/, eval/, xray/, quant/,
probes/, infra/, kernel/) so the layout tells the architecture, but none of them is put on
sys.path as a top-level package (a top-level `eval` or `bench` would shadow common names).
They are reached as `monolith.bench`, `monolith.eval`, ...: from a source checkout through
the package search path below, from an installed wheel through pyproject's package-dir map.
"""
from pathlib import Path

__version__ = "0.1.0"

_ROOT = Path(__file__).resolve().parent.parent
# Only a source checkout has pyproject.toml + kernel/ beside the package; an installed wheel
# maps the subpackages itself and must not see the rest of site-packages as submodules.
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "kernel").is_dir():
    __path__.append(str(_ROOT))  # noqa: F821  (module __path__)

REPO_ROOT = _ROOT
