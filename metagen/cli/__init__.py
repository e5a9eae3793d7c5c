"""The ``metagen`` command. Each subcommand lives in its own module and is imported lazily,
so ``metagen --version`` does not import torch.

Errors a user can fix (bad flags, bad values, missing files) are printed as one line on stderr
with a non-zero exit, never as a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from metagen._version import __version__

# subcommand name -> (module, attribute)
_COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("metagen.cli.generate", "generate"),
    "testbed": ("metagen.cli.testbed", "testbed"),
    "demo": ("metagen.cli.demo", "demo"),
    "bench": ("metagen.cli.bench", "bench"),
    "serve": ("metagen.cli.serve", "serve"),
    "eval": ("metagen.cli.eval", "eval_command"),
    "report": ("metagen.cli.report", "report"),
    "compute-optimal": ("metagen.cli.compute_optimal", "compute_optimal_command"),
    "strategies": ("metagen.cli.strategies", "strategies"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (module, _) in _COMMANDS.items() if _exists(module))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS or not _exists(_COMMANDS[cmd_name][0]):
            return None
        module, attr = _COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)


def _exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="metagen")
def cli() -> None:
    """metagen: inference-time algorithms for LLMs (decoding, meta-generation, efficient engine)."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script. Turns metagen's typed errors into one-line messages
    (exit status 2); a command that calls ``ctx.exit(code)`` exits with ``code`` (``generate``:
    1 when a completion failed)."""
    from metagen.errors import MetagenError

    try:
        code = cli.main(args=argv, prog_name="metagen", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (MetagenError, ValueError, FileNotFoundError) as exc:
        click.echo(f"error: {one_line(str(exc))}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def one_line(text: str) -> str:
    """``text`` on one line: its lines stripped and joined by a space (a parser's report of a
    malformed regex or grammar spans several, with a caret under the place)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
