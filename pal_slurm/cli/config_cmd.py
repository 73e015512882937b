"""`pal config`: show the effective configuration (secrets masked)."""

from __future__ import annotations

import click
import tomli_w

from pal_slurm.cli.context import AppContext
from pal_slurm.cli.render import emit_json, output_options


@click.group()
def config() -> None:
    """Inspect the configuration (/etc/pal/pal.toml, --config, PAL_CONFIG, PAL_DB_URL)."""


@config.command("show")
@output_options(("toml", "json"), "toml: the file as it would be written (the configuration is no table, so no "
                                  "csv); json for scripts.")
@click.pass_obj
def show(app: AppContext, fmt: str) -> None:
    """Print the effective configuration, defaults included, with the database password masked."""
    from pal_slurm.config import config_as_dict

    data = config_as_dict(app.cfg)
    if fmt == "json":
        emit_json(data)
    else:
        click.echo(tomli_w.dumps(_without_none(data)).rstrip())


def _without_none(value: object) -> object:
    """TOML has no null: unset options (None) are left out, which reads back as the default."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value if v is not None]
    return value
