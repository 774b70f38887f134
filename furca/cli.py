"""The `furca` command line: `furca pull [MODEL]`, `furca generate PROMPT`, `furca serve [MODEL]`,
`furca router --worker URL ...`, `furca run FILE`.

Heavy imports happen inside the subcommands, so `furca --help` is instant.
"""

from __future__ import annotations

import argparse
import json
import sys

from furca.cli_flags import add_config_arguments, config_kwargs, string_list
from furca.errors import ConfigError, FurcaError
from furca.runtime.config import EngineConfig


def _cmd_pull(args: argparse.Namespace) -> int:
    from furca.runtime.pull import pull_default_model

    if args.model not in (None, "default", "SmolLM2-135M-Instruct"):
        print(
            f"furca pull: only the default model (SmolLM2-135M-Instruct) can be pulled; "
            f"for other models pass a local HF directory or .gguf file to --model. Got {args.model!r}.",
            file=sys.stderr,
        )
        return 2
    path = pull_default_model(progress=True)
    print(path)
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from furca.runtime.engine import Engine

    with Engine(model=args.model, **config_kwargs(args, EngineConfig)) as engine:
        prompt = args.prompt
        if args.chat:
            prompt = engine.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True
            )
        params = {
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
        }
        if args.seed is not None:
            params["seed"] = args.seed
        last = None
        for delta in engine.generate(prompt, sampling_params=params, stream=True):
            sys.stdout.write(delta.text)
            sys.stdout.flush()
            last = delta
        sys.stdout.write("\n")
        if args.verbose and last is not None and last.meta_info:
            print(json.dumps(last.meta_info, indent=2), file=sys.stderr)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.dp < 1:
        raise ConfigError(f"--dp must be >= 1, got {args.dp}")
    if args.dp > 1:
        return _serve_dp(args)
    from furca.runtime.distributed.group import torchrun_env

    torchrun = torchrun_env() if args.tp_size > 1 else None
    if args.node_rank > 0 or (torchrun is not None and torchrun[0] > 0):  # tensor-parallel ranks only, no server
        from furca.runtime.distributed import launch
        from furca.server.launch import configure_logging

        configure_logging(args.log_level)
        config = EngineConfig.from_kwargs(**config_kwargs(args, EngineConfig))
        return (launch.run_torchrun_rank if torchrun else launch.run_node)(args.model, config)
    from furca.server.args import ServerArgs
    from furca.server.launch import run

    names = set(ServerArgs.field_names())
    return run(ServerArgs.from_kwargs(**{k: v for k, v in vars(args).items() if k in names}))


# `furca serve` flags read by the command line itself (the router in front of --dp
# replicas), not `ServerArgs` options; with --dp, --host and --port are the router's too
DP_FLAGS = ("dp", "router_policy")


def _serve_dp(args: argparse.Namespace) -> int:
    """``furca serve --dp N``: N replicas with this command's other flags, behind a router."""
    from furca.router.config import RouterConfig
    from furca.router.launch import serve_dp

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    given = {a.dest: getattr(args, a.dest) for a in sub.choices["serve"]._actions
             if a.option_strings and a.dest not in ("help", "host", "port", *DP_FLAGS)
             and getattr(args, a.dest) != a.default}
    config = RouterConfig(policy=args.router_policy, api_key=args.api_key)  # the replicas get --api-key too
    return serve_dp(serve_argv(args.model, **given), args.dp, config, args.host, args.port, args.log_level)


def _cmd_router(args: argparse.Namespace) -> int:
    from furca.router.config import RouterConfig
    from furca.router.launch import run_router

    config = RouterConfig(**config_kwargs(args, RouterConfig))
    return run_router(config, args.host, args.port, args.log_level)


def _add_router_parser(sub) -> None:
    from furca.router.config import RouterConfig

    p = sub.add_parser("router", help="route requests over furca servers started elsewhere (cache-aware)")
    p.add_argument("--worker", dest="workers", action="append", default=[], required=True, metavar="URL",
                   help="a replica's base URL (http://host:port); repeat for each replica")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=30000, help="the port to listen on")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_config_arguments(p, RouterConfig, skip=("workers",))
    p.set_defaults(func=_cmd_router)


def _add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per `EngineConfig` field (SGLang's server-argument names where one exists)."""
    add_config_arguments(p.add_argument_group("engine (every EngineConfig option)"), EngineConfig)


def _add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible API and SGLang's native API)")
    p.add_argument("model", nargs="?", default=None, help="HF directory or .gguf file (default: the default model)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=30000, help="the port to listen on")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--served-model-name", default=None, help="the model id clients send (default: directory name)")
    p.add_argument("--chat-template", default=None, help="a jinja chat template (file or text)")
    p.add_argument("--max-queued-requests", type=int, default=None, help="past it, requests get 429")
    p.add_argument("--grammar-timeout", type=float, default=10.0, help="seconds a constraint may compile")
    p.add_argument("--grammar-workers", type=int, default=2,
                   help="threads that compile constraints, a pool of their own (default: 2)")
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024,
                   help="request bodies longer than this get 413 (default: 16 MiB)")
    p.add_argument("--public-docs", action="store_true",
                   help="with --api-key: serve /docs, /redoc and /openapi.json without the key")
    p.add_argument("--expose-model-path", action="store_true",
                   help="show the model's filesystem path in /v1/models, /get_model_info and /server_info")
    p.add_argument("--shutdown-grace-period", type=float, default=30.0,
                   help="SIGTERM: seconds running requests may take before they are aborted")
    p.add_argument("--log-requests", action="store_true",
                   help="log every HTTP request (access log) and each OpenAI request body (first 2000 chars)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="furca's and uvicorn's log level")
    p.add_argument("--json-schema-allow-extra-properties", action="store_true",
                   help="OpenAI routes: object schemas without additionalProperties admit undeclared "
                        "members (JSON Schema's reading); default: declared properties only (OpenAI strict)")
    p.add_argument("--dp", type=int, default=1, metavar="N",
                   help="data parallelism: N replicas on internal ports behind a cache-aware router on --port")
    p.add_argument("--router-policy", default="cache_aware", choices=["cache_aware", "round_robin"],
                   help="with --dp: how the router picks a replica")
    cors = p.add_argument_group("CORS (off unless --allowed-origins is given)")
    cors.add_argument("--allowed-origins", type=string_list, default=(), metavar="ORIGINS",
                      help="origins browsers may call from: a JSON list or comma-separated ('*': any)")
    cors.add_argument("--allowed-methods", type=string_list, default=("*",), metavar="METHODS",
                      help="methods a cross-origin request may use (default: *)")
    cors.add_argument("--allowed-headers", type=string_list, default=("*",), metavar="HEADERS",
                      help="headers a cross-origin request may send (default: *)")
    cors.add_argument("--allow-credentials", action="store_true",
                      help="let cross-origin requests carry credentials (cookies, Authorization)")
    _add_engine_arguments(p)
    p.set_defaults(func=_cmd_serve)


def serve_argv(model: str | None = None, **options) -> list[str]:
    """``furca serve`` arguments for ``options`` named as its flags' destinations (every
    `ServerArgs` / `EngineConfig` field): ``context_length=4096`` -> ``--context-length
    4096``, ``disable_radix_cache=True`` -> ``--disable-radix-cache``,
    ``enable_jump_forward=False`` -> ``--disable-jump-forward``; None and a switch's default
    give nothing. An unknown name raises ConfigError naming it."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.dest: a for a in sub.choices["serve"]._actions if a.option_strings}
    argv = [] if model is None else [str(model)]
    for name, value in options.items():
        action = actions.get(name)
        if action is None or name == "help":
            raise ConfigError(f"furca serve has no option {name!r}; known: {sorted(set(actions) - {'help'})}")
        flag = action.option_strings[-1]
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if bool(value) != bool(action.default):
                argv.append(flag)
        elif value is not None:
            text = json.dumps(list(value)) if isinstance(value, (list, tuple)) else str(value)
            argv += [flag, text]
    return argv


def _run_backend(args: argparse.Namespace):
    """The backend `furca run` sets as default: the in-process engine, or a server URL
    (native API; ``openai:MODEL@URL`` for an OpenAI-compatible one)."""
    spec = args.backend
    if spec == "local":
        from furca.lang.backends.local import LocalBackend

        return LocalBackend(model=args.model) if args.model else LocalBackend()
    if spec.startswith("openai:"):
        from furca.lang.backends.openai_backend import OpenAI

        model, _, url = spec[len("openai:"):].partition("@")
        return OpenAI(model, base_url=url or None, api_key=args.api_key)
    if spec.startswith(("http://", "https://")):
        from furca.lang.backends.runtime_endpoint import RuntimeEndpoint

        return RuntimeEndpoint(spec, api_key=args.api_key)
    raise FurcaError(f"--backend must be 'local', a server URL (http://host:port) or openai:MODEL@URL, got {spec!r}")


def _cmd_run(args: argparse.Namespace) -> int:
    import runpy

    from furca.lang import set_default_backend

    program_args = {}
    for item in args.arg:
        key, sep, value = item.partition("=")
        if not sep:
            raise FurcaError(f"--arg takes KEY=VALUE, got {item!r}")
        program_args[key] = value
    backend = _run_backend(args)
    set_default_backend(backend)
    try:
        sys.argv = [args.file, *args.rest]
        namespace = runpy.run_path(args.file, run_name="__main__" if args.program is None else "__furca_run__")
        if args.program is not None:
            program = namespace.get(args.program)
            if program is None or not hasattr(program, "run"):
                raise FurcaError(f"{args.file} has no @function named {args.program!r}")
            state = program.run(**program_args)
            print(state.text())
            variables = {k: v for k, v in state.executor.variables.items() if isinstance(k, str)}
            print(json.dumps(variables, indent=2, default=str), file=sys.stderr)
    finally:
        set_default_backend(None)
        shutdown = getattr(backend, "shutdown", None) or getattr(backend, "close", None)
        if shutdown is not None:
            shutdown()
    return 0


def _add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a prompt-program file with a default backend set")
    p.add_argument("file", help="a Python file with @function programs")
    p.add_argument("--backend", default="local",
                   help="local (the in-process engine, default), a server URL (native API), or openai:MODEL@URL")
    p.add_argument("--model", default=None, help="with --backend local: HF directory or .gguf (default model if unset)")
    p.add_argument("--api-key", default=None, help="for a server that requires one")
    p.add_argument("--program", default=None,
                   help="run this @function of the file (instead of running the file as __main__) and print its text")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="an argument for --program")
    p.add_argument("rest", nargs="*", help="arguments for the file (its sys.argv[1:]), after --")
    p.set_defaults(func=_cmd_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="furca", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pull", help="fetch the default model (SmolLM2-135M-Instruct) into $FURCA_HOME")
    p.add_argument("model", nargs="?", default=None)
    p.set_defaults(func=_cmd_pull)

    p = sub.add_parser("generate", help="generate a completion for one prompt, streamed to stdout")
    p.add_argument("prompt")
    p.add_argument("--model", default=None, help="HF directory or .gguf file (default: the default model)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="this request's sampling seed")
    p.add_argument("-v", "--verbose", action="store_true", help="print meta_info to stderr")
    _add_engine_arguments(p)
    p.set_defaults(func=_cmd_generate)

    _add_serve_parser(sub)
    _add_router_parser(sub)
    _add_run_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FurcaError as exc:
        print(f"furca {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
