"""The short torture run CI makes: every backend present, its faults, a few seconds each.

Each test starts the backend's throwaway servers (the harness's own launchers), runs one round
per fault and asserts, per round: faults were injected, they bit (a holder was killed, a grant
came while a holder was paused and its stale write was refused, clients saw the server or
network fault), and no property the backend promises was violated. Violations it does not
promise (a Redis restarted without persistence forgets grants) are allowed and must be the
documented kinds. A control run with the resource's fencing off must find violations: the
checker is not blind. An existing server (``--url``) gets the client and network faults.

In CI ($CI set) a backend whose servers cannot start fails its test instead of skipping it.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import shard_of
from tests.servers.fixtures import server_unavailable
from tumbler.testing.backends.redis.server import RedisServer
from tumbler.torture.backends import Deployment, Settings, SetupError, deployments, spec_for_url
from tumbler.torture.harness import BackendRun, Options, RoundResult, run_backend, run_torture

pytestmark = pytest.mark.spread

#: seconds of faults per round: enough for at least one fault of each kind
SECONDS = 3.0

#: the five network faults in one round, each in turn (see ``next_fault``)
NETWORK = "net-cut+net-drop+net-delay+net-reset+net-blip"

#: The rounds CI runs per backend. Kinds the deployment promises the same through share a
#: round: they take turns, and the round goes on until each has hit what it aimed at, so
#: each still proves it bit (``hazard_exercised``); the seconds and the workers' start-up are
#: paid once. A restart does not share: a store restarted without persistence promises less.
CI_ROUNDS: dict[str, list[str]] = {
    "sqlite": ["kill+pause"],
    "redis": ["kill+pause", "restart", NETWORK],
    "redis-aof": ["restart"],
    # what Fedora and RHEL ship for Redis: its server's rounds and its holders' (the network's
    # faults reach the same client and scripts as in Redis's rounds)
    "valkey": ["kill+pause", "restart"],
    "redis-cluster": ["kill", "minority"],
    "zookeeper": ["kill+pause", "restart", NETWORK],
    "zookeeper-ensemble": ["minority", "leader", "minority-pause+leader-pause", "member-blackhole"],
    "postgresql": ["kill+pause", "restart", NETWORK],
    "postgresql-pgbouncer": ["restart", "net-cut+net-drop"],
    "mysql": ["kill+pause", "restart", NETWORK],
    "etcd": ["kill+pause", "restart", NETWORK],
    "etcd-cluster": ["minority+minority-pause+leader+leader-pause"],
    # one member cut off from the clients, in a test of its own on the lock alone
    "etcd-cluster-blackhole": ["member-blackhole"],
    "redlock": ["kill+pause", "minority", "rolling-loss"],
    # Redlock's other rounds, in a test of their own that runs beside the first one
    "redlock-hangs": ["minority-pause", "net-cut+net-drop+net-delay+net-reset"],
}


def _describe(round_: RoundResult) -> str:
    check = round_.check
    lines = [
        f"{round_.backend}/{round_.fault}: {check.grants} grants, {check.faults} faults "
        f"({round_.missed} found no target, {round_.astray} missed it), "
        f"hazard: {round_.exercised_note}, kept in {round_.directory}"
    ]
    lines += [f"  {v.kind}: {v.detail}" for v in round_.check.violations[:10]]
    return "\n".join(lines)


def _torture(
    backend: str,
    rounds: list[str],
    tmp_path: Path,
    fencing: str = "on",
    primitives: tuple[str, ...] = ("lock",),
    lock_delay: float = 0.0,
) -> BackendRun:
    spec = deployments()[backend]
    reason = spec.unavailable()
    if reason is not None:
        server_unavailable(f"cannot torture {backend}: {reason}")
    settings = Options(
        seconds=SECONDS,
        ttl=1.0,
        seed=7,
        fencing=fencing,
        workdir=tmp_path,
        primitives=primitives,
        lock_delay=lock_delay,
    )
    try:
        run = run_backend(spec, rounds, settings, tmp_path)
    except SetupError as error:
        server_unavailable(f"cannot start {backend}: {error}")
    assert run.skipped == {}, run.skipped
    assert [round_.fault for round_ in run.rounds] == [
        fault for fault in rounds for _ in primitives
    ]
    return run


def _assert_kept_promises(run: BackendRun) -> None:
    for round_ in run.rounds:
        report = _describe(round_)
        assert round_.check.faults >= 1, report
        assert round_.check.grants >= 3, report
        assert round_.exercised, report
        assert round_.promised_violations == [], report
        # whatever it does not promise is one of the documented kinds for this fault
        assert {v.kind for v in round_.expected_violations} <= set(round_.not_promised), report


@pytest.mark.timeout(60)
def test_sqlite(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("sqlite", CI_ROUNDS["sqlite"], tmp_path))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("primitive", ["fair", "semaphore", "rwlock", "election", "multi"])
def test_sqlite_primitives_in_both_flavours(primitive: str, tmp_path: Path) -> None:
    """Each primitive through pauses, half the workers blocking and half asyncio: both
    flavours are granted, and the checker's properties for the primitive hold (a
    multi-lock's: per name, and no deadlock)."""
    run = _torture("sqlite", ["pause"], tmp_path, primitives=(primitive,))
    _assert_kept_promises(run)
    (round_,) = run.rounds
    report = _describe(round_)
    assert round_.primitive == primitive
    assert round_.check.flavours["sync"] >= 1, report
    assert round_.check.flavours["asyncio"] >= 1, report
    if primitive == "rwlock":
        assert round_.check.sides["read"] >= 1, report
        assert round_.check.sides["write"] >= 1, report
    if primitive == "multi":
        # each hold not lost wrote the counter of each of its 2 or 3 names
        check = round_.check
        assert check.writes_accepted >= 2 * (check.grants - check.holds_lost), report


@pytest.mark.timeout(120)
def test_redis(tmp_path: Path) -> None:
    run = _torture("redis", CI_ROUNDS["redis"], tmp_path)
    _assert_kept_promises(run)
    restart = next(round_ for round_ in run.rounds if round_.fault == "restart")
    # a Redis without persistence is documented to forget grants on restart
    assert set(restart.not_promised) == {"double-hold", "unnoticed-loss", "work-after-grant"}


@pytest.mark.timeout(90)
def test_redis_holder_cut_off_alone_is_told_before_the_next_grant(tmp_path: Path) -> None:
    """The field finding of issue 11: a silent partition of the holder alone. The others go on
    through their own proxies and are granted the lock once its lease runs out at the server:
    by then the holder must have stopped working (its on_lost has run)."""
    run = _torture("redis", ["net-isolate"], tmp_path)
    (round_,) = run.rounds
    report = _describe(round_)
    assert round_.check.grants_during_isolation >= 1, report
    assert {record.target for record in round_.faults} <= {
        f"worker {client}'s proxy" for client in ("w0", "w1", "w2", "w3")
    }, report
    assert all(record.acq is not None for record in round_.faults), report
    _assert_kept_promises(run)


@pytest.mark.timeout(120)
def test_valkey(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("valkey", CI_ROUNDS["valkey"], tmp_path))


@pytest.mark.timeout(60)
def test_redis_with_appendfsync_always_keeps_grants_across_restarts(tmp_path: Path) -> None:
    run = _torture("redis-aof", CI_ROUNDS["redis-aof"], tmp_path)
    _assert_kept_promises(run)
    assert run.rounds[0].not_promised == {}


@pytest.mark.timeout(90)
def test_redis_cluster(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("redis-cluster", CI_ROUNDS["redis-cluster"], tmp_path))


@pytest.mark.timeout(120)
def test_zookeeper(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("zookeeper", CI_ROUNDS["zookeeper"], tmp_path))


@pytest.mark.timeout(150)
def test_zookeeper_ensemble(tmp_path: Path) -> None:
    run = _torture("zookeeper-ensemble", CI_ROUNDS["zookeeper-ensemble"], tmp_path)
    _assert_kept_promises(run)
    # a hold whose session cannot move within its lease is lost, visibly: waiters only
    _assert_cut_off_the_holders_member(run, {"acquire"})


@pytest.mark.timeout(120)
def test_postgresql(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("postgresql", CI_ROUNDS["postgresql"], tmp_path))


@pytest.mark.timeout(120)
def test_postgresql_behind_pgbouncer(tmp_path: Path) -> None:
    _assert_kept_promises(
        _torture("postgresql-pgbouncer", CI_ROUNDS["postgresql-pgbouncer"], tmp_path)
    )


@pytest.mark.timeout(120)
def test_mysql(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("mysql", CI_ROUNDS["mysql"], tmp_path))


@pytest.mark.timeout(120)
def test_etcd(tmp_path: Path) -> None:
    _assert_kept_promises(_torture("etcd", CI_ROUNDS["etcd"], tmp_path))


#: the primitives of the etcd cluster's round: etcd serves every request in arrival order,
#: fair or not (one code path), so "fair" would be the lock's round again
ETCD_CLUSTER_PRIMITIVES = ("lock", "semaphore", "rwlock")


def primitives_of_this_run(seed: str | None, primitives: tuple[str, ...]) -> tuple[str, ...]:
    """All of ``primitives``, or, in a run with a seed (the full run's
    ``--tumbler-split-flavours``: the commit's hash), the one the seed picks: another with
    each commit, so that each has its round every few commits."""
    if seed is None:
        return primitives
    return (primitives[shard_of(seed, "primitives", len(primitives))],)


@pytest.mark.timeout(240)
def test_etcd_cluster_with_each_primitive_in_turn(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The costliest of CI's rounds (a minute or more on two busy cores for each primitive,
    beside its three members' CPU): the full run takes one primitive, another each commit."""
    seed = request.config.getoption("tumbler_split_flavours")
    primitives = primitives_of_this_run(seed, ETCD_CLUSTER_PRIMITIVES)
    run = _torture("etcd-cluster", CI_ROUNDS["etcd-cluster"], tmp_path, primitives=primitives)
    _assert_kept_promises(run)


def test_a_run_with_a_seed_takes_one_primitive_and_each_in_turn() -> None:
    assert primitives_of_this_run(None, ETCD_CLUSTER_PRIMITIVES) == ETCD_CLUSTER_PRIMITIVES
    picked = [primitives_of_this_run(f"commit{n}", ETCD_CLUSTER_PRIMITIVES) for n in range(30)]
    assert all(len(chosen) == 1 for chosen in picked)
    assert set(picked) == {(primitive,) for primitive in ETCD_CLUSTER_PRIMITIVES}
    assert picked == [
        primitives_of_this_run(f"commit{n}", ETCD_CLUSTER_PRIMITIVES) for n in range(30)
    ]


def _assert_cut_off_the_holders_member(run: BackendRun, promised: set[str]) -> None:
    """Every ``member-blackhole`` fault cut off the member a long holder's client was on, and
    the deployment promises what users keep through it (``acquire``, ``hold``)."""
    assert run.rounds
    for round_ in run.rounds:
        if "member-blackhole" not in round_.fault.split("+"):
            continue
        blackholes = [record for record in round_.faults if record.kind == "member-blackhole"]
        assert blackholes, _describe(round_)
        assert all(record.target.endswith("(the holder's)") for record in blackholes)
        assert any(record.acq is not None for record in blackholes), _describe(round_)
        assert set(deployments()[round_.backend].available["member-blackhole"]) == promised


@pytest.mark.timeout(120)
def test_etcd_cluster_with_a_member_cut_off_from_the_clients(tmp_path: Path) -> None:
    """A member that runs on with its peers but that no client reaches (its proxy
    blackholed past the lease): a request with no answer moves to another member, so no
    acquire fails and no hold is lost."""
    run = _torture("etcd-cluster", CI_ROUNDS["etcd-cluster-blackhole"], tmp_path)
    _assert_kept_promises(run)
    _assert_cut_off_the_holders_member(run, {"acquire", "hold"})


@pytest.mark.timeout(120)
def test_redlock(tmp_path: Path) -> None:
    """Five masters: holders killed and paused, up to two masters at once killed and
    restarted empty (each kept out of grants for restart_delay), and three restarted empty one
    after another while a lease runs."""
    run = _torture("redlock", CI_ROUNDS["redlock"], tmp_path)
    _assert_kept_promises(run)
    for kind in ("minority", "rolling-loss"):
        round_ = next(round_ for round_ in run.rounds if round_.fault == kind)
        assert round_.not_promised == {}, _describe(round_)
        # a fault on any master reaches the hold: every one keeps its own copy of the grant
        assert any(record.acq is not None for record in round_.faults), _describe(round_)


@pytest.mark.timeout(120)
def test_redlock_through_hung_masters_and_network_faults(tmp_path: Path) -> None:
    """Up to two masters SIGSTOPped past the lease, then the network to every master faulted
    through a proxy each: nothing promised may break."""
    run = _torture("redlock", CI_ROUNDS["redlock-hangs"], tmp_path)
    _assert_kept_promises(run)
    hung = run.rounds[0]
    assert {record.kind for record in hung.faults} == {"minority-pause"}, _describe(hung)
    assert any(record.acq is not None for record in hung.faults), _describe(hung)
    # every master restarted empty at once is a loss of all of them: not what Redlock promises
    assert "double-hold" in deployments()["redlock"].not_promised_under("restart")


@pytest.mark.timeout(120)
def test_redlock_with_every_primitive(tmp_path: Path) -> None:
    """The other primitives (the lock is above) while up to two masters crash and come back
    empty: a fair lock, a semaphore (which needs four masters of five), a read/write lock."""
    run = _torture("redlock", ["minority"], tmp_path, primitives=("fair", "semaphore", "rwlock"))
    _assert_kept_promises(run)
    assert {round_.primitive for round_ in run.rounds} == {"fair", "semaphore", "rwlock"}


@pytest.mark.timeout(60)
def test_without_fencing_the_checker_finds_the_paused_holders_write(tmp_path: Path) -> None:
    """The control experiment: the same pauses, a resource that checks nothing."""
    run = _torture("sqlite", ["pause"], tmp_path, fencing="off")
    (round_,) = run.rounds
    found = round_.check.by_kind()
    assert found["stale-accepted"] >= 1, _describe(round_)
    assert found["lost-update"] >= 1, _describe(round_)
    # unfenced, these are "not promised": the round passes, the report shows them
    assert round_.ok, _describe(round_)
    assert round_.directory is not None


@pytest.mark.timeout(60)
def test_without_fencing_a_lock_delay_past_the_pause_lets_no_stale_write_land(
    tmp_path: Path,
) -> None:
    """The control experiment again, with a lock-delay longer than a pause outlasts the lease
    (a pause of 3 s from a lease of 1 s, renewed a third of the way in): nobody is granted
    the lock until the paused holder's write has landed, so the unfenced resource gets no
    stale write and loses no update, where the test above finds both."""
    run = _torture("sqlite", ["pause"], tmp_path, fencing="off", lock_delay=4.0)
    (round_,) = run.rounds
    report = _describe(round_)
    assert round_.check.faults >= 1, report
    assert round_.check.holds_lost >= 1, report  # a pause outlasted a lease ...
    found = round_.check.by_kind()
    assert found["stale-accepted"] == found["lost-update"] == found["overlap"] == 0, report
    # ... and no grant came while the holder was paused: what the delay is for
    assert not round_.exercised, report
    assert "no grant while a holder was paused" in round_.exercised_note, report


@pytest.mark.timeout(90)
def test_an_existing_server_gets_client_and_network_faults(
    fresh_redis_server: RedisServer, tmp_path: Path
) -> None:
    """``--url``: the harness cannot kill the server, but puts a proxy in front of it."""
    url = f"{fresh_redis_server.url}?socket_timeout=0.33&connect_timeout=0.33"
    spec = spec_for_url(url)
    assert "restart" not in spec.faults
    assert "net-cut" in spec.faults
    settings = Options(seconds=SECONDS, ttl=1.0, seed=7, workdir=tmp_path)
    run = run_backend(spec, ["kill", "net-cut+net-drop"], settings, tmp_path)
    assert [round_.fault for round_ in run.rounds] == ["kill", "net-cut+net-drop"]
    _assert_kept_promises(run)
    network = run.rounds[1]
    assert network.check.fault_hits > 0, _describe(network)
    assert {record.target for record in network.faults} == {"proxy"}


@pytest.mark.timeout(60)
def test_backends_tortured_side_by_side_are_reported_in_order(tmp_path: Path) -> None:
    """``--jobs``: two deployments at once, each with its own servers, workers and rounds;
    the run lists them in the order asked for, each with its promises kept."""
    first = deployments()["sqlite"]
    second = spec_for_url(f"sqlite:///{tmp_path / 'given.db'}")
    settings = Options(seconds=SECONDS, ttl=1.0, seed=7, workdir=tmp_path / "runs")
    run = run_torture([first, second], ["kill"], settings, jobs=2)
    assert [backend.backend for backend in run.backends] == [first.name, second.name]
    for backend in run.backends:
        assert [round_.fault for round_ in backend.rounds] == ["kill"]
        _assert_kept_promises(backend)


@pytest.mark.timeout(60)
def test_a_deployment_that_cannot_start_stops_those_beside_it(tmp_path: Path) -> None:
    """With ``--jobs``, one deployment's setup error ends the run as it would one by one:
    the deployment beside it, in a long round, stops at its next fault and cleans up."""

    def cannot_start(directory: Path, settings: Settings) -> Deployment:
        # fail once the long round beside it has its workers' histories
        while not list((tmp_path / "sqlite").glob("kill/lock/w*.jsonl")):
            time.sleep(0.05)
        raise SetupError("no server here")

    running = deployments()["sqlite"]
    broken = dataclasses.replace(running, name="broken", start=cannot_start)
    settings = Options(seconds=600, ttl=1.0, seed=7, workdir=tmp_path)
    with pytest.raises(SetupError, match="no server here"):
        run_torture([running, broken], ["kill"], settings, jobs=2)
    assert not _worker_processes(tmp_path)


def _worker_processes(directory: Path) -> list[int]:
    """The torture workers still running with their histories under ``directory``."""
    return [
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if any(str(directory) in part for part in process.info["cmdline"] or ())
    ]


#: the deployments whose fair lines CI checks with a waiter killed in them
DEAD_WAITER_DEPLOYMENTS = [
    "sqlite",
    "redis",
    "redis-cluster",
    "zookeeper",
    "etcd",
    "postgresql",
    "postgresql-pgbouncer",
    "mysql",
]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", DEAD_WAITER_DEPLOYMENTS)
def test_a_dead_fair_waiter_stalls_no_line(backend: str, tmp_path: Path) -> None:
    """A waiter killed in a fair lock's line: its entry must not hold the next grant up for
    longer than the dead-waiter bound after the holder lets go (nobody may pass it)."""
    run = _torture(backend, ["kill-waiter"], tmp_path, primitives=("fair",))
    _assert_kept_promises(run)
    (round_,) = run.rounds
    assert {record.kind for record in round_.faults} == {"kill-waiter"}, _describe(round_)
