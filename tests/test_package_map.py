"""The package map is explicit (pyproject's [tool.setuptools.package-dir], monolith/__init__.py):
the product's subpackages import as monolith.<name>, from a source checkout (PYTHONPATH=.) and
from the editable install alike, and nothing else of the repository does (monolith.tests,
monolith.web, a second copy monolith.monolith)."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ["monolith.bench", "monolith.bench.baselines", "monolith.eval", "monolith.xray", "monolith.quant",
           "monolith.probes", "monolith.infra", "monolith.kernel"]
NOT_PRODUCT = ["monolith.tests", "monolith.web", "monolith.monolith", "monolith.scripts", "monolith.upstream"]
# drops the editable install's finder, so that only what a source checkout has (sys.path + monolith's
# own map) resolves
SOURCE_ONLY = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
INSTALLED_ONLY = "import sys, monolith; sys.meta_path[:] = [f for f in sys.meta_path if not hasattr(f, 'monolith_root')]; "
PROBE = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        m = importlib.import_module(name)
        out[name] = getattr(m, "__file__", None)
    except ModuleNotFoundError as e:
        out[name] = "missing: " + str(e)
print(json.dumps(out))
"""


def _probe(names, *, source_only: bool, pythonpath: str | None, installed_only: bool = False) -> dict:
    import json

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    code = (SOURCE_ONLY if source_only else "") + (INSTALLED_ONLY if installed_only else "") + PROBE
    r = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT / "tests", env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check(got: dict) -> None:
    for name in PRODUCT:
        folder = pyproject_dirs()[name]
        assert got[name] and not got[name].startswith("missing"), (name, got[name])
        assert Path(got[name]).resolve() == (ROOT / folder / "__init__.py").resolve(), (name, got[name])
    for name in NOT_PRODUCT:
        assert got[name].startswith("missing"), f"{name} imports ({got[name]}): only the mapped subpackages may"


def pyproject_dirs() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def test_pyproject_lists_exactly_the_mapped_packages_and_the_product_ones():
    t = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(t["packages"]) == sorted(t["package-dir"]) == sorted(["monolith", *PRODUCT])
    assert all((ROOT / d / "__init__.py").is_file() for d in t["package-dir"].values())


def test_every_monolith_import_in_the_code_is_a_module_or_a_mapped_subpackage():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    names = set()
    for f in files:
        names |= set(re.findall(r"^\s*(?:from|import) (monolith\.[a-z_]+)", (ROOT / f).read_text(), re.M))
    mapped = set(pyproject_dirs())
    stray = sorted(n for n in names if n not in mapped and not (ROOT / "monolith" / (n.split(".")[1] + ".py")).is_file())
    assert not stray, f"imports of monolith.<name> that neither monolith/ nor the package map holds: {stray}"
    assert {"monolith.bench", "monolith.xray", "monolith.quant"} <= names  # the scan itself found imports


def test_from_source_only_the_product_subpackages_import():
    _check(_probe(PRODUCT + NOT_PRODUCT, source_only=True, pythonpath=str(ROOT)))


def test_the_installed_map_gives_the_same_packages():
    """Without PYTHONPATH, through the editable install's own finder (monolith's source-checkout
    finder removed once the package is imported): pyproject's map as setuptools installed it."""
    got = _probe(["monolith"], source_only=False, pythonpath=None)
    if got["monolith"].startswith("missing"):
        pytest.skip("monolith is not installed in this interpreter (pip install -e . --no-deps)")
    if Path(got["monolith"]).resolve() != (ROOT / "monolith" / "__init__.py").resolve():
        pytest.skip(f"the installed monolith is another checkout's: {got['monolith']}")
    _check(_probe(PRODUCT + NOT_PRODUCT, source_only=False, pythonpath=None, installed_only=True))
