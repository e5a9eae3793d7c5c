"""``metagen serve MODEL``: an OpenAI-compatible server over the built-in engine.

Binds ``127.0.0.1`` unless ``--host`` says otherwise. ``--api-key KEY`` (or the environment
variable ``METAGEN_API_KEY``, which keeps the key out of the process list) makes every route but
``/health`` require ``Authorization: Bearer KEY``; the key is never printed or logged. Engine
options go to :class:`~metagen.engine.config.EngineConfig`: ``--dtype``, ``--device`` and the
table :mod:`metagen.cli.engine_options` that ``metagen generate`` takes too (``--num-blocks``,
``--max-num-seqs``, ``--quantization``, ``--deterministic``, ``--kv-cache-dtype``,
``--kv-window-tokens``, ``--kv-sink-tokens``, speculative decoding: ``--speculative-model``,
``--prompt-lookup``, ``--num-speculative-tokens`` ...). ``EngineConfig`` checks them before
anything loads, so a bad value is its typed error naming the field, one line and exit status 2;
so is a bad folder (the model loads before the port is bound). Per-request options travel in the
body (:mod:`metagen.server.requests`): ``token_healing``, and the output constraints as vLLM and
OpenAI spell them (``structured_outputs``, ``guided_regex`` / ``guided_json`` /
``guided_choice`` / ``guided_grammar``, ``response_format``).

``--orm NAME=SPEC`` (repeatable) loads an outcome reward model that strategy requests name
(``{"metagen": {"strategy": "best_of_n", "reward": NAME}}``, see :mod:`metagen.server.strategy`);
``--prm NAME=SPEC`` (repeatable) a process reward model (``step_beam_search``'s ``prm``). SPEC is
the scorer grammar ``metagen eval --reward`` / ``--prm`` read (:mod:`metagen.scorers.scorer_spec`:
a folder, ``likelihood`` (bare: MODEL's own confidence), ``likelihood+FOLDER``, a remote
``pooling+URL?model=NAME``, ...), loaded by the same resolver. The loaded reward models are also
served for scoring: ``POST /pooling`` (vLLM's shape, classifier and value-head ORMs) and ``POST
/score`` (metagen's JSON contract, every ORM and PRM), see :mod:`metagen.server.scoring`.
SIGTERM / Ctrl-C stop accepting connections and let in-flight requests finish for up to
``--shutdown-timeout`` seconds. A connection whose request headers take more than 10 seconds to
arrive is closed (slowloris).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from metagen.cli.engine_options import (
    check_engine_options,
    engine_flags,
    given,
    pop_engine_options,
)


@click.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind (0.0.0.0 exposes the server to the network).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--api-key", envvar="METAGEN_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' on every route but /health.")
@click.option("--served-model-name", default=None,
              help="The model id clients send (default: the folder's name).")
@click.option("--max-concurrent", default=256, show_default=True, type=int,
              help="Generation requests in flight; one more is answered 429.")
@click.option("--max-body-bytes", default=4 * 1024 * 1024, show_default=True, type=int)
@click.option("--dtype", default=None, help="Model dtype (engine option).")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (engine option).")
@engine_flags
@click.option("--orm", "orms", multiple=True, metavar="NAME=SPEC",
              help="An outcome reward model strategy requests can name, also served on "
              "POST /pooling and /score (repeatable). SPEC: a model folder, likelihood "
              "(MODEL's own confidence), likelihood+FOLDER, judge+FOLDER, or a remote "
              "pooling+URL?model=NAME / classify+URL?... / json+URL?model=NAME.")
@click.option("--prm", "prms", multiple=True, metavar="NAME=SPEC",
              help="A process reward model step-search requests can name, also served on "
              "POST /score (repeatable). SPEC: a model folder, PRESET+FOLDER, likelihood, "
              "likelihood+FOLDER, pooling+URL?model=NAME&tokenizer=FOLDER or json+URL?model=NAME.")
@click.option("--shutdown-timeout", default=30, show_default=True, type=int,
              help="Seconds in-flight requests get to finish on SIGTERM.")
def serve(model: Path, host: str, port: int, api_key: str | None,
          served_model_name: str | None, max_concurrent: int, max_body_bytes: int,
          dtype: str | None, device: str | None,
          orms: tuple[str, ...],
          prms: tuple[str, ...],
          shutdown_timeout: int, **flags: Any) -> None:
    """Serve MODEL (a Hugging Face folder) over the OpenAI API on HOST:PORT."""
    from metagen.server import LocalBackend, ServerConfig, create_app
    from metagen.server.protocol import head_timeout_protocol
    from metagen.server.rewards import load_named, parse_named_specs

    config = ServerConfig(model_name=served_model_name or model.resolve().name, api_key=api_key,
                          max_concurrent=max_concurrent, max_body_bytes=max_body_bytes)
    options = engine_options(dtype, device, flags)
    orm_specs = parse_named_specs(orms, "reward", "orm")
    prm_specs = parse_named_specs(prms, "prm", "prm")
    from metagen.generators.local import LocalGenerator

    rewards = load_named(orm_specs, "reward", "orm", default_folder=model)
    process_rewards = load_named(prm_specs, "prm", "prm", default_folder=model)
    generator = LocalGenerator.from_pretrained(model, **options)
    app = create_app(LocalBackend(generator), config, rewards, process_rewards)
    import uvicorn

    logging.basicConfig(level=logging.INFO)
    click.echo(f"serving {config.model_name!r} on http://{host}:{port}/v1"
               + (" (API key required)" if api_key else ""), err=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="info", http=head_timeout_protocol(),
                    timeout_graceful_shutdown=shutdown_timeout, server_header=False)
    finally:
        generator.close()


def engine_options(dtype: str | None, device: str | None, flags: dict[str, Any]
                   ) -> dict[str, Any]:
    """The ``EngineConfig`` fields of the command's engine flags (``flags``: its ``**flags``;
    those given only), checked by ``EngineConfig`` before anything loads."""
    options = given(dict(pop_engine_options(flags), dtype=dtype, device=device))
    check_engine_options(options)
    return options
