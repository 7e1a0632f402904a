"""How a command fails: the one place expected failures become one line on stderr and
exit code 1 (``one_line_errors``, ``failure_message``; ``run_async`` runs an async command
inside it), and the top-level group class (``Commands``) that says a usage error in one
line (exit 2) and stops the embedded servers a failed command started."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import click

from kafkaesque.cli.context import Context
from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.embedded import EmbeddedError
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.redis_errors import failure_message as redis_failure_message


def run_async(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Run an async command, turning expected failures into one line and exit code 1."""

    async def run_and_close(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        finally:
            context = click.get_current_context(silent=True)
            if context is not None and (obj := context.find_object(Context)) is not None:
                await obj.aclose()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_line_errors():
            return asyncio.run(run_and_close(*args, **kwargs))

    return wrapper


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """The one place the CLI turns expected failures into one line on stderr and exit
    code 1 (130 on Ctrl-C); anything else is a bug and keeps its traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        raise  # the reader went away (`| head`): click exits quietly
    except click.ClickException:
        raise
    except Exception as exc:
        message = failure_message(exc)
        if message is None:
            raise
        raise click.ClickException(message) from None


def failure_message(exc: BaseException) -> str | None:
    """One line for people about an expected failure; None for anything else."""
    if isinstance(exc, KafkaesqueError | EmbeddedError):
        return str(exc)
    redis_failure = redis_failure_message(exc)
    if redis_failure is not None:
        return redis_failure
    # The archive's and Spark's modules are loaded only by the commands that use them.
    if "storage_pg" in sys.modules:
        from storage_pg.pool import describe_failure

        message = describe_failure(exc)
        if message is not None:
            return message
    if "storage_pg.spark" in sys.modules:
        from storage_pg.spark import SparkJobError

        if isinstance(exc, SparkJobError):
            return str(exc)
    if isinstance(exc, OSError):
        # Reading the input, the data directory, listening on a port, ...
        return exc.strerror if exc.filename is None and exc.strerror else str(exc)
    return None


class OneLineUsageError(click.ClickException):
    """A usage mistake told in one line (click's own takes four), exit code 2."""

    exit_code = 2

    def __init__(self, error: click.UsageError) -> None:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        super().__init__(error.format_message() + hint)


class Commands(click.Group):
    """The top-level group: usage errors of every command come out as one line; a command
    that fails stops the embedded servers it started; Redis going away is a command's
    error, not a retry (only ``serve`` retries, once it reached Redis: see REDIS)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        retrying, stopped = REDIS.retrying, REDIS.stopped
        REDIS.retrying = False
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            if _failed(exc) and isinstance(ctx.obj, Context):
                ctx.obj.stop_started()
            if isinstance(exc, click.UsageError):
                raise OneLineUsageError(exc) from None
            raise
        finally:
            REDIS.retrying, REDIS.stopped = retrying, stopped


def _failed(exc: BaseException) -> bool:
    """Whether the command failed: not when it exits 0, is interrupted (Ctrl-C, 130) or
    its reader went away (``| head``)."""
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code != 0
    if isinstance(exc, SystemExit):
        return exc.code not in (None, 0, 130)
    return not isinstance(exc, KeyboardInterrupt | BrokenPipeError)
