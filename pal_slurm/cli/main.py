"""Entry point of `pal`: global options, logging, and the one error boundary.

The exit codes, the same for every command: 0 done; 1 a runtime error or nothing found
(PalError, database errors: one line `pal: error: ...` on stderr); 2 a usage error (one line
too, naming the option); 130 Ctrl-C (`pal: error: interrupted`); 141 a reader that went away
(`pal ... | head`: quiet, 128 + SIGPIPE). A bug is one line `pal: internal error: ...` and exit
1; tracebacks only with --debug. `PalGroup.main` is that boundary, so the console script and
click's CliRunner (the tests) see the same codes and lines.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from pal_slurm import __version__
from pal_slurm.cli import classify_cmd, config_cmd, db_cmd, demo_cmd, profile_cmd, report_cmd, simulate_cmd
from pal_slurm.cli import drain_cmd, fairness_cmd, gpus_cmd, learn_cmd, quarantine_cmd
from pal_slurm.cli import slurm_cmd
from pal_slurm.cli import agent_cmd, jobs_cmd
from pal_slurm.cli import placer_cmd, savings_cmd
from pal_slurm.cli.context import AppContext
from pal_slurm.errors import PalError

if TYPE_CHECKING:
    from pal_slurm.config import PalConfig


class PalFailure(click.ClickException):
    """A known failure, shown as one line `pal: error: ...` with exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"pal: error: {self.format_message()}", err=True)


class PalGroup(click.Group):
    """Turns PalError and driver errors raised by any subcommand into PalFailure, and every way
    a command ends into one exit code (the module docstring lists them)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = sys.argv[1:] if args is None else list(args)
        sys.exit(exit_code(lambda: super(PalGroup, self).main(argv, prog_name, complete_var,
                                                               standalone_mode=False, **extra),
                           debug="--debug" in argv))

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:  # `pal --help | head -1`: help is written while the context is made
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            # `pal ... | head`: the reader has gone; end quietly as Unix tools do (128 + SIGPIPE)
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except PalError as exc:
            if _debug(ctx):
                raise
            raise PalFailure(str(exc)) from exc
        except OSError as exc:
            if _debug(ctx):
                raise
            name = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            raise PalFailure(f"{exc.strerror or exc}:{name}".rstrip(":")) from exc
        except Exception as exc:
            if not _is_database_error(exc) or _debug(ctx):
                raise
            from pal_slurm.db.engine import describe_error

            raise PalFailure(f"database error: {describe_error(exc)}") from exc


def _is_database_error(exc: BaseException) -> bool:
    """Whether `exc` is a SQLAlchemy error. Asked of the already imported module, so that
    `pal --help` and every command that opens no database never import SQLAlchemy (about a
    second of start-up): a command that never imported it cannot have raised its errors."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    return sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError)


EXIT_BROKEN_PIPE = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is left at exit raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class OneLineFormatter(logging.Formatter):
    """Each log message on one line, control characters escaped: job names, users and admin
    comments come from users, and a newline in one must not forge a log line (nor an escape
    sequence reach a terminal that shows the journal). A traceback still follows as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        from pal_slurm.cli.render import printable

        return printable(super().formatMessage(record))


def _set_log_level(level: int) -> None:
    logging.getLogger().setLevel(level)
    # Alembic says "Context impl SQLiteImpl." at INFO each time the schema is checked (the
    # placer checks it with every reload of the classes): only with -vv
    logging.getLogger("alembic").setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))


def _configured_log_level(cfg: PalConfig) -> None:
    """[logging] level, for a command run without -v or --debug (the flags win over the file)."""
    _set_log_level(logging.getLevelNamesMapping()[cfg.logging.level])


def _debug(ctx: click.Context) -> bool:
    obj = ctx.find_object(AppContext)
    return bool(obj and obj.debug)


@click.group(cls=PalGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--config", "config_path", metavar="FILE", envvar="PAL_CONFIG",
              help="Configuration file [default: /etc/pal/pal.toml; env PAL_CONFIG].")
@click.option("--db", "db_url", metavar="URL", envvar="PAL_DB_URL",
              help="Database URL, overrides the file [env PAL_DB_URL]; e.g. sqlite:///tmp/pal.db. A password "
                   "on a command line is visible to every user (ps): keep a server's URL in the configuration file "
                   "or its [database] url_file.")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.version_option(__version__, prog_name="pal")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, db_url: str | None, debug: bool, verbose: int) -> None:
    """pal-slurm: measure GPU performance variability and place Slurm GPU jobs with the PAL policy.

    \b
    Typical first steps:
      pal db upgrade                      create or migrate the database
      pal profile import FILE...          load benchmark results
      pal classify                        compute performance bins per GPU model
      pal report                          see the fleet's variability
    """
    flagged = debug or verbose > 0
    level = logging.DEBUG if debug or verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="pal: %(levelname)s: %(message)s", stream=sys.stderr, force=True)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(OneLineFormatter("pal: %(levelname)s: %(message)s"))
    _set_log_level(level)
    # Without -v/--debug, [logging] level applies from when the command reads the configuration:
    # reading it here would make `pal CMD --help` fail on a broken file (AppContext loads it lazily)
    app = AppContext(config_path=config_path, db_url=db_url, debug=debug,
                     on_config=None if flagged else _configured_log_level)
    ctx.obj = app
    ctx.call_on_close(app.close)


for _command in (config_cmd.config, db_cmd.db, profile_cmd.profile, classify_cmd.classify, report_cmd.report,
                 gpus_cmd.gpus, simulate_cmd.simulate, demo_cmd.demo):
    cli.add_command(_command)
report_cmd.report.add_command(fairness_cmd.fairness_cmd)
report_cmd.report.add_command(savings_cmd.savings)
gpus_cmd.gpus.add_command(drain_cmd.drain_cmd)
gpus_cmd.gpus.add_command(learn_cmd.learn_cmd)
for _command in (quarantine_cmd.quarantine_cmd, quarantine_cmd.release_cmd, quarantine_cmd.quarantined_cmd):
    gpus_cmd.gpus.add_command(_command)
cli.add_command(slurm_cmd.slurm)
cli.add_command(agent_cmd.agent)
cli.add_command(jobs_cmd.jobs)
for _command in (placer_cmd.placer, placer_cmd.placements, placer_cmd.explain):
    cli.add_command(_command)


EXIT_INTERRUPTED = 130


def exit_code(run: Callable[[], Any], *, debug: bool) -> int:
    """Run the command line (click's main without its own exits) and say how it ended: the
    one place that prints usage errors, Ctrl-C, closed pipes and bugs, each as one line."""
    try:
        code = run()
        sys.stdout.flush()  # a pipe closed after the last write shows here, not at exit
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        message = "; ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
        click.echo(f"pal: error: {message}{hint}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("pal: error: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug: one line unless --debug asked for the traceback
        if debug:
            raise
        click.echo(f"pal: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        return 1
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: the exit code `PalGroup.main` decides, returned instead of raised."""
    try:
        cli.main(args=argv, prog_name="pal", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
