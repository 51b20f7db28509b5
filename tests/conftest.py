"""Shared fixtures: a private cache with a tiny pre-trained supernet, and Ray settings."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TINY_STEPS = 2

# The compilers of the bundles' Makefile targets. Where ccache is installed, a test session
# calls them through it, with a cache of its own: the kernels are the same few sources in every
# bundle the tests build (hundreds of builds, 5 of a host build's 6 s), and a bundle's
# Makefile compiles each source alone, so ccache can hand the kernels' objects from one bundle
# to the next. It keys an object by the compiler, its flags and the preprocessed source, so a
# cached object is the one the compiler would make.
BUNDLE_COMPILERS = ("gcc", "aarch64-linux-gnu-gcc", "arm-none-eabi-gcc", "riscv64-unknown-elf-gcc")
_compiler_cache: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    ccache = shutil.which("ccache")
    if ccache is None or os.environ.get("TINYTUNE_TEST_CCACHE") == "0":
        return
    folder = Path(tempfile.mkdtemp(prefix="tt-ccache-"))
    (folder / "bin").mkdir()
    for name in BUNDLE_COMPILERS:
        if shutil.which(name) is not None:
            (folder / "bin" / name).symlink_to(ccache)  # ccache then runs the next one on PATH
    os.environ["PATH"] = f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["CCACHE_DIR"] = str(folder / "cache")
    os.environ["CCACHE_NOHASHDIR"] = "1"  # the same object, whichever bundle folder compiles it
    _compiler_cache.append(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _compiler_cache:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> object:
    """One intra-op thread per test process: on a shared 2-core machine, two torch threads
    competing with other work slow small convolutions down by orders of magnitude."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding a 2-step pre-trained ofa-proxyless-w0.35 checkpoint."""
    from tinytune.data import SourceTask
    from tinytune.models import PretrainRecipe, checkpoint_path, pretrain_supernet, save_supernet
    from tinytune.spaces import get_supernet

    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("TINYTUNE_CACHE")
    os.environ["TINYTUNE_CACHE"] = str(cache)
    try:
        spec = get_supernet("ofa-proxyless-w0.35")
        recipe = PretrainRecipe(steps=TINY_STEPS, batch_size=8)
        net = pretrain_supernet(spec, recipe, SourceTask(recipe.source_classes).batch)
        save_supernet(net, spec, recipe, checkpoint_path(spec, recipe))
    finally:
        if old is None:
            os.environ.pop("TINYTUNE_CACHE", None)
        else:
            os.environ["TINYTUNE_CACHE"] = old
    return cache


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty cache folder of the test session's own, for the tests that decode image folders
    (their decoded images would otherwise land in the user's cache)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def use_session_cache(session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYTUNE_CACHE", str(session_cache))
    return session_cache


@pytest.fixture
def use_tiny_cache(tiny_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tiny_cache))
    return tiny_cache


@pytest.fixture
def another_programs_sqlite(tmp_path: Path) -> Path:
    """``theirs.db``: a SQLite file of another program (one table, no tinytune or Optuna
    tables), alone in ``tmp_path``, for commands that must read it without changing a byte."""
    import sqlite3

    path = tmp_path / "theirs.db"
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("CREATE TABLE foo (x)")
    connection.close()
    return path


@pytest.fixture
def tiny_checkpoint(use_tiny_cache: Path) -> Path:
    """The path of the tiny checkpoint (resolved inside the private cache)."""
    from tinytune.models import PretrainRecipe, checkpoint_path
    from tinytune.spaces import get_supernet

    recipe = PretrainRecipe(steps=TINY_STEPS, batch_size=8)
    return checkpoint_path(get_supernet("ofa-proxyless-w0.35"), recipe)


# PostgreSQL: each test gets a database ``tt_test_<random>``, created through the admin database
# (AUTOCOMMIT) and dropped afterwards, so runs never collide and leave nothing behind. Tests skip,
# with the reason, when no server answers at ``TINYTUNE_TEST_POSTGRES_URL`` (default: the local
# server).
POSTGRES_ADMIN_URL = os.environ.get(
    "TINYTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

_server_problem: list[str | None] = []  # memo: [None] when the server answers, [reason] if not


def _postgres_problem() -> str | None:
    if not _server_problem:
        engine = sa.create_engine(POSTGRES_ADMIN_URL, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as connection:
                connection.execute(sa.text("SELECT 1"))
            _server_problem.append(None)
        except sa.exc.SQLAlchemyError as e:
            reason = str(getattr(e, "orig", e)).splitlines()[0]
            _server_problem.append(
                f"no PostgreSQL server answers at {POSTGRES_ADMIN_URL}: {reason}"
            )
        finally:
            engine.dispose()
    return _server_problem[0]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    problem = _postgres_problem()
    if problem is not None:
        pytest.skip(problem)
    name = f"tt_test_{uuid.uuid4().hex[:16]}"
    # pre-ping: a test may restart the server between creating the database and dropping it
    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield (
            sa.make_url(POSTGRES_ADMIN_URL)
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def refuse_connections() -> Callable[[str], AbstractContextManager[None]]:
    """``with refuse_connections(url):`` — the PostgreSQL database of ``url`` (a test's own, from
    ``postgres_url``) refuses new connections and its sessions are ended, as while its server
    restarts, without touching the other databases of the server; allowed again on leaving."""

    @contextmanager
    def refused(url: str) -> Iterator[None]:
        name = sa.make_url(url).database
        admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                connection.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
                connection.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": name},
                )
            yield
        finally:
            with admin.connect() as connection:
                connection.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            admin.dispose()

    return refused


@pytest.fixture
def restart_postgres() -> Iterator[Callable[[], None]]:
    """A function that restarts the local PostgreSQL server under test with ``pg_ctlcluster``
    (skips with the reason where the server is not local or the tool is absent); the server is
    started at the end of the test, whatever happened."""
    import shutil
    import subprocess

    problem = _postgres_problem()
    if problem is not None:
        pytest.skip(problem)
    if sa.make_url(POSTGRES_ADMIN_URL).host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"the PostgreSQL server at {POSTGRES_ADMIN_URL} is not this machine's")
    if shutil.which("pg_ctlcluster") is None:
        pytest.skip("pg_ctlcluster is not installed: cannot restart the PostgreSQL server")
    engine = sa.create_engine(POSTGRES_ADMIN_URL)
    try:
        with engine.connect() as connection:
            number = int(connection.execute(sa.text("SHOW server_version_num")).scalar_one())
    finally:
        engine.dispose()
    cluster = [str(number // 10000), "main"]

    def control(action: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
            check=True,
            capture_output=True,
            timeout=120,
        )

    try:
        yield lambda: control("restart")
    finally:
        status = subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "status"],
            capture_output=True,
        )
        if status.returncode != 0:  # stopped: bring it back for everyone else
            control("start")


@pytest.fixture
def answer_lost() -> Callable[[sa.Engine, str], AbstractContextManager[list[bool]]]:
    """``with answer_lost(engine, "INSERT INTO t") as lost:`` — the first transaction on
    ``engine`` that runs a statement starting so commits on the server, and then its connection
    breaks before the answer comes back, as when a server goes away at that moment (once;
    ``lost`` is ``[True]`` after it happened)."""

    import psycopg

    @contextmanager
    def lose(engine: sa.Engine, statement: str) -> Iterator[list[bool]]:
        wrote: list[bool] = []
        lost: list[bool] = []

        def note(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
            if sql.lstrip().startswith(statement):
                wrote.append(True)

        def commit_then_drop(conn: sa.Connection) -> None:
            if wrote and not lost:
                lost.append(True)
                conn.connection.dbapi_connection.commit()
                conn.invalidate()
                raise sa.exc.OperationalError(
                    "COMMIT",
                    {},
                    psycopg.OperationalError("server closed the connection unexpectedly"),
                    connection_invalidated=True,
                )

        sa.event.listen(engine, "before_cursor_execute", note)
        sa.event.listen(engine, "commit", commit_then_drop)
        try:
            yield lost
        finally:
            sa.event.remove(engine, "commit", commit_then_drop)
            sa.event.remove(engine, "before_cursor_execute", note)

    return lose
