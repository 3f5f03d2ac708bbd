"""monolith: one persistent CUDA kernel per token for Qwen3-0.6B batch-1 decode.

The repository keeps the design card's top-level folders (bench/, eval/, xray/, quant/,
probes/, infra/, kernel/) so the layout tells the architecture, but none of them is put on
sys.path as a top-level package (a top-level `eval` or `bench` would shadow common names).
They are reached as `monolith.bench`, `monolith.eval`, ... through one explicit map, pyproject's
[tool.setuptools.package-dir]: an installed wheel (or editable install) gets it from setuptools;
a source checkout run with PYTHONPATH=. gets it from the finder below, which reads the same table.
Only the mapped subpackages import: `monolith.tests`, `monolith.web` and `monolith.monolith` do not.
"""
import sys
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"

_ROOT = Path(__file__).resolve().parent.parent
REPO_ROOT = _ROOT


def package_dirs(pyproject: Path = _ROOT / "pyproject.toml") -> dict[str, Path]:
    """The subpackages of monolith that pyproject maps, and their folders ({"monolith.bench": bench/, ...})."""
    import tomllib

    table = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {name: pyproject.parent / d for name, d in table.items() if name.startswith("monolith.")}


class _SourceMap:
    """A meta-path finder for a source checkout: monolith.<sub> from its mapped folder, nothing else.
    First on sys.meta_path, so that a checkout run with PYTHONPATH=. imports its own subpackages
    even where another checkout is installed editable."""

    def __init__(self, root: Path, dirs: dict[str, Path]):
        self.monolith_root, self.dirs = root, dirs

    def find_spec(self, fullname, path=None, target=None):
        d = self.dirs.get(fullname)
        if d is None or not (d / "__init__.py").is_file():
            return None
        return spec_from_file_location(fullname, d / "__init__.py", submodule_search_locations=[str(d)])


# Only a source checkout has pyproject.toml + kernel/ beside the package; an installed wheel maps
# the subpackages itself.
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "kernel").is_dir():
    # one finder per checkout, also when the package is imported again (importlib.reload)
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "monolith_root", None) != _ROOT]
    sys.meta_path.insert(0, _SourceMap(_ROOT, package_dirs()))
