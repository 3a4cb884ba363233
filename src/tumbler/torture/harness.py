"""Runs torture rounds: one round per backend, fault and primitive, each checked on its own.

A round: start the fenced resource and ``workers`` worker processes on a fresh lock name, all
taking the round's primitive, the slots alternating between the blocking and the asyncio
flavour; inject the round's fault again and again for ``seconds`` (each time waiting until the
lock is granted again, so every fault's recovery is measured), and on until each kind was
injected its share of ``min_faults`` and the workers were granted the lock its share of
``min_grants`` (both are per deployment, spread over its rounds: see :func:`run_backend`;
within ``round_limit`` seconds, reported if hit), and past that until each kind has hit what
it was aimed at (a few tries at most); stop the workers; wait until the lock has no holder;
check the history (:func:`tumbler.torture.check.check_round`).

The servers of a backend are started once for all of its rounds (and restarted by the
faults that kill them); each round gets its own directory with every history file, kept when
``keep`` is set or the round found a violation.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import platform
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tumbler
from tumbler.errors import TumblerError

from .backends import BackendSpec, Deployment, Settings, SetupError, deployments
from .check import (
    ALL_KINDS,
    FENCED_KINDS,
    SERVERS_DOWN,
    CheckResult,
    FaultRecord,
    RoundHistory,
    Violation,
    check_round,
    hazard_exercised,
)
from .faults import HOLDER_FAULTS, SERVING_PATIENCE, Nemesis
from .history import HistoryWriter
from .pool import PoolError, ResourceProcess, WorkerPool
from .worker import multi_names

__all__ = [
    "BackendRun",
    "Options",
    "RoundResult",
    "TortureRun",
    "environment",
    "next_fault",
    "run_backend",
    "Stopped",
    "run_round",
]

_NS = 1_000_000_000
#: the fraction of holds that last most of a lease in server and network rounds
LONG_HOLDS = 0.25


@dataclass(frozen=True)
class Options:
    """How to torture: the same for every backend and fault of a run."""

    workers: int = 4
    #: seconds of faults per round (the round ends with a quiet recovery on top)
    seconds: float = 20.0
    ttl: float = 1.0
    #: seconds between a worker's read and its write: the window kills and pauses aim at
    think: float = 0.02
    #: resource fencing: on (reads and writes), writes, off (the control experiment)
    fencing: str = "on"
    seed: int = 0
    #: how long a paused holder stays stopped (default 2 TTL + 1 s)
    pause: float | None = None
    #: keep every round's directory (histories), not only those with violations
    keep: bool = False
    #: where round directories go (default: a new temporary directory)
    workdir: Path | None = None
    #: the primitives, one round each (see :data:`tumbler.torture.worker.PRIMITIVES`)
    primitives: tuple[str, ...] = ("lock",)
    #: a semaphore's permits
    permits: int = 3
    #: the locks' lock-delay: a lost grant keeps the lock from everyone this long after its
    #: lease (0: none)
    lock_delay: float = 0.0
    #: a soak: each deployment goes on past its rounds' seconds until each of its fault kinds
    #: was injected this often, summed over the kind's rounds (one per primitive) ...
    min_faults: int = 0
    #: ... and its workers were granted their locks this often, summed over all its rounds
    min_grants: int = 0
    #: ... but no longer than this many seconds of faults (the report says when it was hit)
    round_limit: float = 3600.0

    @property
    def acquire_timeout(self) -> float:
        return 2 * self.ttl + 2.0 + self.lock_delay


@dataclass
class RoundResult:
    """One backend under one fault: what happened and what the checker found."""

    backend: str
    fault: str
    check: CheckResult
    faults: list[FaultRecord]
    #: violations the backend does not promise to avoid under this fault, and why
    not_promised: dict[str, str]
    exercised: bool
    exercised_note: str
    seconds: float
    directory: Path | None = None
    #: the primitive the workers took
    primitive: str = "lock"
    #: faults the nemesis tried but found nothing to hit (no holder in time)
    missed: int = 0
    #: faults injected that did not certainly hit what they were aimed at (the hold ended
    #: before the fault began): the round injected again
    astray: int = 0
    #: the round stopped at ``round_limit`` before its ``min_faults`` or ``min_grants``: why
    limit_hit: str | None = None

    @property
    def name(self) -> str:
        """``backend/fault``, with the primitive unless it is the plain lock."""
        suffix = "" if self.primitive == "lock" else f"/{self.primitive}"
        return f"{self.backend}/{self.fault}{suffix}"

    @property
    def promised_violations(self) -> list[Violation]:
        return [v for v in self.check.violations if v.kind not in self.not_promised]

    @property
    def expected_violations(self) -> list[Violation]:
        return [v for v in self.check.violations if v.kind in self.not_promised]

    @property
    def ok(self) -> bool:
        return not self.promised_violations

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "fault": self.fault,
            "primitive": self.primitive,
            "limit_hit": self.limit_hit,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "promised_violations": len(self.promised_violations),
            "not_promised_violations": len(self.expected_violations),
            "not_promised": self.not_promised,
            "hazard_exercised": self.exercised,
            "hazard_note": self.exercised_note,
            "faults_missed": self.missed,
            "faults_astray": self.astray,
            "directory": str(self.directory) if self.directory else None,
            "check": self.check.as_json(),
            "fault_records": [record.as_json() for record in self.faults],
        }


@dataclass
class BackendRun:
    """Every round of one backend, or why it did not run."""

    backend: str
    summary: str
    promise: str
    rounds: list[RoundResult] = field(default_factory=list)
    #: why the backend did not run at all
    unavailable: str | None = None
    #: faults asked for that do not apply here, and why
    skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    not_promised: dict[str, dict[str, str]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "summary": self.summary,
            "promise": self.promise,
            "unavailable": self.unavailable,
            "skipped": self.skipped,
            "versions": self.versions,
            "not_promised": self.not_promised,
            "rounds": [round_.as_json() for round_ in self.rounds],
        }


@dataclass
class TortureRun:
    """A whole ``tumbler torture`` run."""

    options: Options
    backends: list[BackendRun]
    environment: dict[str, Any]
    started: str
    seconds: float

    @property
    def rounds(self) -> list[RoundResult]:
        return [round_ for backend in self.backends for round_ in backend.rounds]

    @property
    def ok(self) -> bool:
        return all(round_.ok for round_ in self.rounds)

    def as_json(self) -> dict[str, Any]:
        options = {
            "workers": self.options.workers,
            "seconds": self.options.seconds,
            "ttl": self.options.ttl,
            "think": self.options.think,
            "fencing": self.options.fencing,
            "seed": self.options.seed,
            "primitives": list(self.options.primitives),
            "permits": self.options.permits,
            "lock_delay": self.options.lock_delay,
            "min_faults": self.options.min_faults,
            "min_grants": self.options.min_grants,
            "round_limit": self.options.round_limit,
        }
        return {
            "ok": self.ok,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "options": options,
            "environment": self.environment,
            "backends": [backend.as_json() for backend in self.backends],
        }


def environment(versions: dict[str, str] | None = None) -> dict[str, Any]:
    """The machine a run was made on: CPUs, kernel, Python, tumbler and server versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tumbler": tumbler.__version__,
        "servers": dict(versions or {}),
        # the machine may be shared: how busy it was says how to read the timings
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


# -- one round -----------------------------------------------------------------------------


def _free_after_stop(admin_url: str, names: Sequence[str], bound: float) -> float | None:
    """Seconds until none of the locks ``names`` shows a holder (None if one still has one
    after ``bound``)."""
    began = time.monotonic()
    try:
        locks = tumbler.connect(admin_url)
    except TumblerError:
        return None
    with locks:
        while True:
            try:
                if not any(locks.status(name).holders for name in names):
                    return time.monotonic() - began
            except TumblerError:
                pass  # the server may still be coming back
            if time.monotonic() - began > bound:
                return None
            time.sleep(0.02)


def next_fault(
    kinds: Sequence[str], landed: Collection[str], attempt: int, *, overtime: bool, futile: int
) -> str | None:
    """The fault kind a round injects next (None: the round's faults are over).

    During the round's seconds (``overtime`` false) the kinds take turns (``attempt`` is how
    many injections were tried). Past them, only the kinds that have not yet certainly hit
    what they were aimed at (``landed``): a round whose fault never bit proves nothing. Each
    such try can come to nothing again (no holder in time, or the holder ended its hold just
    before the fault): after ``futile`` reaches three per kind the round gives up, and the
    report says that its fault never bit.
    """
    if not kinds:
        return None
    if not overtime:
        return kinds[attempt % len(kinds)]
    pending = [kind for kind in kinds if kind not in landed]
    if not pending or futile >= 3 * len(kinds):
        return None
    return pending[attempt % len(pending)]


class Stopped(Exception):
    """A round given up because its run is stopping (see :func:`run_torture`'s ``jobs``)."""


def _short_of(
    kinds: Sequence[str], records: Sequence[FaultRecord], grants: int, options: Options
) -> str | None:
    """What a round still lacks of its ``min_faults`` per kind and its ``min_grants``, or None."""
    lacking = [
        f"{sum(1 for record in records if record.kind == kind)} {kind} faults"
        for kind in kinds
        if sum(1 for record in records if record.kind == kind) < options.min_faults
    ]
    if grants < options.min_grants:
        lacking.append(f"{grants} grants")
    return ", ".join(lacking) if lacking else None


def run_round(
    spec: BackendSpec,
    deployment: Deployment,
    fault: str,
    options: Options,
    directory: Path,
    *,
    primitive: str = "lock",
    log: Callable[[str], None] = lambda message: None,
    stopping: threading.Event | None = None,
) -> RoundResult:
    """Torture one backend with one fault kind (``none``: a baseline; ``a+b``: kinds injected
    in turn) on one primitive and check the history. Raises :class:`Stopped`, its workers and
    resource stopped, once ``stopping`` is set."""
    rng = random.Random(f"{options.seed}:{spec.name}:{fault}:{primitive}")
    kinds = [kind for kind in fault.split("+") if kind != "none"]
    # histories are appended to: a directory left by an earlier run must not mix in
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    lock = f"torture-{spec.name}-{fault}-{primitive}-{options.seed}-{rng.randrange(1 << 30):x}"
    # a lost grant frees the lock its lock-delay after its lease
    bound = options.ttl + options.lock_delay + spec.recovery_grace
    # the last round's faults may have left an election under way: the workers start once
    # the servers serve, or the round cannot start
    why_not = deployment.wait_serving(SERVING_PATIENCE)
    if why_not is not None:
        raise SetupError(f"the servers do not serve: {why_not}")
    resource = ResourceProcess(directory, options.fencing).start()
    pool = WorkerPool(
        url=deployment.workers_url(kinds),
        lock=lock,
        resource=resource.socket_path,
        directory=directory,
        count=options.workers,
        ttl=options.ttl,
        think=options.think,
        acquire_timeout=options.acquire_timeout,
        idle=0.005,
        seed=options.seed,
        long_hold=0.0 if set(kinds) <= {*HOLDER_FAULTS, "none"} else LONG_HOLDS,
        # a proxy per worker only where a fault aims at one worker's connections; there a long
        # hold outlasts a lease, so that the cut-off holder is still working when its lease
        # runs out at the server and another worker is granted the lock
        own_proxies=deployment.isolatable() if "net-isolate" in kinds else None,
        long_max=3.0 if "net-isolate" in kinds else 1.2,
        primitive=primitive,
        permits=options.permits,
        lock_delay=options.lock_delay,
    )
    records: list[FaultRecord] = []
    missed = astray = 0
    limit_hit: str | None = None
    began = time.monotonic()
    try:
        pool.start()
        pool.grant_after(0, timeout=bound + 10)
        nemesis = Nemesis(deployment, pool, ttl=options.ttl, rng=rng, pause=options.pause)
        # the seconds count from when the workers are busy
        landed: set[str] = set()
        start = time.monotonic()
        end = start + options.seconds
        attempt = 0
        while True:
            if stopping is not None and stopping.is_set():
                raise Stopped(f"{spec.name} {fault} {primitive}: stopped with the run")
            short = _short_of(kinds, records, len(pool.grant_times), options)
            overtime = time.monotonic() >= end and short is None
            if short is not None and time.monotonic() >= start + options.round_limit:
                limit_hit = f"stopped at {options.round_limit:g} s with {short}"
                log(f"  {spec.name} {fault} {primitive}: {limit_hit}")
                overtime = True
            kind = next_fault(kinds, landed, attempt, overtime=overtime, futile=missed + astray)
            if kind is None:
                break
            attempt += 1
            record = nemesis.inject(kind)
            if record is None:
                missed += 1
                continue
            records.append(record)
            if nemesis.landed:
                landed.add(kind)
            else:
                astray += 1
            log(
                f"  {spec.name} {record.kind}: {record.target} {record.detail}".rstrip()
                + ("" if nemesis.landed else " (hit no hold for certain)")
            )
            # recovered: granted again (or the bound passed: the checker reports it)
            pool.grant_after(record.over, timeout=bound)
            time.sleep(rng.uniform(0.1, 0.5) * options.ttl)
        if not kinds:
            # a baseline: its seconds, and on until its grants (within the limit)
            time.sleep(options.seconds)
            limit = start + options.round_limit
            while len(pool.grant_times) < options.min_grants and time.monotonic() < limit:
                pool.grant_after(pool.grant_times[-1], timeout=min(bound, limit - time.monotonic()))
            if len(pool.grant_times) < options.min_grants:
                limit_hit = (
                    f"stopped at {options.round_limit:g} s with {len(pool.grant_times)} grants"
                )
        elif records:
            pool.grant_after(records[-1].over, timeout=bound)
        t_end = time.monotonic_ns()
        pool.stop(timeout=options.acquire_timeout + options.ttl + 10)
        # a multi round's workers take the names of its pool, never the round's lock itself
        names = multi_names(lock) if primitive == "multi" else (lock,)
        free = _free_after_stop(deployment.admin_url, names, bound)
    finally:
        pool.kill_all()
        resource.stop()
    with HistoryWriter(directory / "faults.jsonl") as fault_log:
        for record in records:
            fault_log.write_record(record.as_json())
    histories = pool.histories()
    resource_history = resource.history()
    history = RoundHistory(
        lock=lock,
        ttl=options.ttl,
        primitive=primitive,
        permits=options.permits,
        workers={client: h.events for client, h in histories.items()},
        resource=resource_history.events,
        faults=records,
        killed=pool.killed,
        bad_exits=pool.bad_exits,
        damaged_lines=sum(h.damaged_lines for h in histories.values())
        + resource_history.damaged_lines,
        recovery_bound=bound,
        t_end=t_end,
        free_after_stop=free,
        available=spec.available,
        acquire_timeout=options.acquire_timeout,
        dead_waiter_bound=spec.dead_waiter_bound,
    )
    result = check_round(history)
    not_promised = spec.not_promised_under(fault)
    if any(violation.kind == SERVERS_DOWN for violation in result.violations):
        # never promised, by any deployment: said where it happened, with why
        not_promised[SERVERS_DOWN] = (
            "the servers did not serve again within the harness's patience: their own "
            "outage, which no client rides out"
        )
    if options.fencing != "on":
        for kind in FENCED_KINDS:
            not_promised.setdefault(
                kind, f"the resource's fencing is {options.fencing!r}: it is not promised"
            )
    exercised, note = hazard_exercised(kinds, result)
    return RoundResult(
        backend=spec.name,
        fault=fault,
        primitive=primitive,
        limit_hit=limit_hit,
        check=result,
        faults=records,
        not_promised={kind: why for kind, why in not_promised.items() if kind in ALL_KINDS},
        exercised=exercised,
        exercised_note=note,
        seconds=time.monotonic() - began,
        directory=directory,
        missed=missed,
        astray=astray,
    )


# -- one backend ---------------------------------------------------------------------------


def _launcher_errors() -> tuple[type[Exception], ...]:
    """The server launchers' error class (when they are installed)."""
    try:
        from ..testing.servers._common import ServerError
    except ImportError:
        return ()
    return (ServerError,)


def resolve_faults(spec: BackendSpec, faults: Sequence[str]) -> tuple[str, ...]:
    """``default`` stands for the backend's default faults, ``all`` for every one that applies."""
    chosen: list[str] = []
    for fault in faults:
        expanded = (
            spec.default_faults
            if fault == "default"
            else spec.faults
            if fault == "all"
            else (fault,)
        )
        chosen += [name for name in expanded if name not in chosen]
    return tuple(chosen)


def run_backend(
    spec: BackendSpec,
    faults: Sequence[str],
    options: Options,
    root: Path,
    *,
    log: Callable[[str], None] = lambda message: None,
    stopping: threading.Event | None = None,
) -> BackendRun:
    """Start the backend's servers, run one round per applicable fault, stop the servers.

    Raises :class:`SetupError` if the servers cannot be started, and :class:`Stopped` once
    ``stopping`` is set (another deployment of the run failed, or the run was interrupted).
    """
    run = BackendRun(
        spec.name,
        spec.summary,
        spec.promise,
        not_promised={fault: dict(kinds) for fault, kinds in spec.not_promised.items()},
    )
    reason = spec.unavailable()
    if reason is not None:
        run.unavailable = reason
        return run
    chosen, run.skipped = spec.applicable(resolve_faults(spec, faults))
    if not chosen:
        return run
    backend_dir = root / spec.name
    backend_dir.mkdir(parents=True, exist_ok=True)
    log(f"{spec.name}: starting servers")
    deployment = spec.start(backend_dir / "servers", Settings(ttl=options.ttl))
    setup_errors: tuple[type[Exception], ...] = (PoolError, *_launcher_errors())
    try:
        run.versions = deployment.versions()
        plan = [(fault, primitive) for fault in chosen for primitive in options.primitives]
        for index, (fault, primitive) in enumerate(plan):
            log(f"{spec.name}: {fault} on {primitive} for {options.seconds:g} s")
            round_dir = backend_dir / fault / primitive
            shares = _round_shares(run.rounds, plan[index:], options)
            try:
                result = run_round(
                    spec,
                    deployment,
                    fault,
                    shares,
                    round_dir,
                    primitive=primitive,
                    log=log,
                    stopping=stopping,
                )
            except setup_errors as error:
                # a worker that cannot start, a server that does not come back
                account = deployment.account()
                raise SetupError(
                    f"{spec.name} {fault} {primitive}: {error}"
                    + (f" (the servers: {account})" if account else "")
                    + f" (the harness: {_busiest_threads()})"
                ) from error
            # kept when there is anything to look at: a violation (promised or not), or a
            # fault that never bit
            if not options.keep and not result.check.violations and result.exercised:
                shutil.rmtree(round_dir, ignore_errors=True)
                result.directory = None
            run.rounds.append(result)
    finally:
        deployment.close()
    return run


def _busiest_threads(top: int = 4) -> str:
    """The harness's threads that used the most CPU, for a round that could not start: its
    proxies forward the workers' traffic, and a thread left spinning by something else in
    the process would starve them."""
    try:
        # psutil comes with mirakuru, which starts the servers (it has no type hints)
        psutil: Any = importlib.import_module("psutil")
        threads = psutil.Process().threads()
    except Exception as error:  # no psutil: nothing more to say
        return f"threads not known ({error})"
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    busiest = sorted(threads, key=lambda t: t.user_time + t.system_time, reverse=True)[:top]
    return f"{len(threads)} threads, the busiest " + ", ".join(
        f"{names.get(t.id, t.id)} {t.user_time + t.system_time:.1f} s" for t in busiest
    )


def _round_shares(
    done: Sequence[RoundResult], left: Sequence[tuple[str, str]], options: Options
) -> Options:
    """The options of the next of the ``left`` rounds of a deployment, with its share of the
    deployment's ``min_faults`` (per kind) and ``min_grants``: what the rounds ``done`` have
    not reached yet, spread evenly over the rounds left that can take it, so that a round that
    fell short is made up by the next ones.

    The grants are asked of the rounds whose faults hit only holders (kill, pause), where the
    lock is granted tens of times a second; server and network faults hold the lock up for a
    second or more each time, and so does a dead waiter (kill-waiter) where the backend ends
    its entry only with a lease (a second or more on etcd, ZooKeeper and the SQL stores), so
    those rounds run for their faults only and add what grants they make. A deployment without
    holder rounds spreads its grants over all of them.
    """
    if not options.min_faults and not options.min_grants:
        return options
    fault = left[0][0]
    min_faults = 0
    for kind in fault.split("+"):
        injected = sum(1 for result in done for record in result.faults if record.kind == kind)
        rounds = sum(1 for other, _ in left if kind in other.split("+"))
        min_faults = max(min_faults, math.ceil(max(0, options.min_faults - injected) / rounds))
    grants_left = max(0, options.min_grants - sum(result.check.grants for result in done))
    carriers = [other for other, _ in left if _holder_faults_only(other)]
    if not carriers:
        carriers = [other for other, _ in left]
    min_grants = math.ceil(grants_left / len(carriers)) if fault in carriers else 0
    return dataclasses.replace(options, min_faults=min_faults, min_grants=min_grants)


def _holder_faults_only(fault: str) -> bool:
    return all(kind in HOLDER_FAULTS for kind in fault.split("+"))


def run_torture(
    specs: Sequence[BackendSpec],
    faults: Sequence[str],
    options: Options,
    *,
    log: Callable[[str], None] = lambda message: None,
    jobs: int = 1,
) -> TortureRun:
    """Every backend of ``specs`` with ``faults``; servers that cannot start raise SetupError.

    ``jobs`` backends are tortured side by side (each its own servers, workers and rounds, in
    order): a soak's hours shared out, on a machine with the cores for it. The report lists
    them in the order of ``specs`` whatever order they end in.
    """
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    began = time.monotonic()
    root = options.workdir or Path(tempfile.mkdtemp(prefix="torture-"))
    root.mkdir(parents=True, exist_ok=True)
    if jobs <= 1:
        runs = [run_backend(spec, faults, options, root, log=log) for spec in specs]
    else:
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

        # Ctrl-C (in this thread) or one deployment's setup error stops the others at their
        # next fault, each cleaning up its workers and servers, before the error goes on
        stopping = threading.Event()
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="torture") as pool:
            futures = [
                pool.submit(run_backend, spec, faults, options, root, log=log, stopping=stopping)
                for spec in specs
            ]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
            finally:
                # an error of one (or Ctrl-C here) stops the others; after a success, nothing
                # runs any more anyway
                stopping.set()
            # the error that stopped the run, not the others' Stopped that it caused
            errors = [future.exception() for future in futures]
            for error in errors:
                if error is not None and not isinstance(error, Stopped):
                    raise error
            runs = [future.result() for future in futures]
    versions: dict[str, str] = {}
    for run in runs:
        versions.update(run.versions)
    if (
        options.workdir is None
        and not options.keep
        and all(round_.directory is None for run in runs for round_ in run.rounds)
    ):
        shutil.rmtree(root, ignore_errors=True)
    return TortureRun(options, runs, environment(versions), started, time.monotonic() - began)


def backend_specs(names: Sequence[str]) -> list[BackendSpec]:
    """The entries named (``all``: every entry), in table order; KeyError for unknown names."""
    known = deployments()
    if "all" in names:
        return list(known.values())
    return [known[name] for name in names]
