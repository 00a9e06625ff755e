"""``python -m pilot``: the pilot's command line (what a job script runs on the allocation's
first node): the allocation found, the transport opened, then :class:`pilot.agent.PilotAgent`'s
loop until it leaves. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys

from . import faults
from .agent import PilotAgent
from .allocation import discover
from .guardian import guard
from .settings import PILOT_SETTINGS, check
from .transport import PilotSpool, Transport, keys
from .tmpdirs import remove_left

ORDER_WAIT = 60.0  # seconds a pilot started ahead (--await-start) waits for its order


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pilot", description="pwe glide-in pilot")
    ap.add_argument("--dir", required=True, help="the pilot's directory (tasks.jsonl, events.jsonl)")
    ap.add_argument("--slots", type=int, default=None, help="cores to fill on this machine (no batch system)")
    ap.add_argument("--hosts", default=None, help="explicit nodes: host:cores,host:cores")
    ap.add_argument("--hostfile", default=None, help="a file of 'host [cores]' lines")
    ap.add_argument("--launcher", default=None, choices=["auto", "fork", "srun", "ssh", "mpiexec"],
                    help="how members reach other nodes (default: by allocation)")
    ap.add_argument("--launcher-prefix", default=None, help="the launcher's command, with {node} {nodes} "
                    "{hosts} {nnodes} {ranks} {per_node} {threads} {cwd}")
    ap.add_argument("--core-cap", type=int, default=None, help="most cores used per node (coreUsageRule)")
    ap.add_argument("--gpus-per-node", type=int, default=None, help="GPUs on each node (default: from the batch "
                    "system, or CUDA_VISIBLE_DEVICES here)")
    ap.add_argument("--memory-per-node", type=int, default=None, help="MB of memory on each node for members")
    ap.add_argument("--scratch", default=None, help="where members' own $TMPDIRs are made (the host's scratch; "
                    "default: $TMPDIR, else /tmp)")
    ap.add_argument("--tmp-per-node", type=int, default=None, help="MB of $TMPDIR space per node for members "
                    "(tmpPerMember; default: the free space under the tmp root)")
    ap.add_argument("--walltime", type=float, default=None, help="minutes until the allocation ends")
    ap.add_argument("--margin", type=float, default=None,
                    help="seconds before the end to stop and hand back (default: 60, or a tenth of a short walltime)")
    ap.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeats")
    ap.add_argument("--idle-timeout", type=float, default=300.0, help="leave after this long with nothing to do")
    ap.add_argument("--spawners", type=int, default=None,
                    help="local spawner processes that start this node's members (default: none below 8 slots, "
                         "one per 8 slots above; 0: the pilot starts them itself; or PWE_SPAWNERS)")
    ap.add_argument("--fsync", action="store_true", help="fsync events (a network filesystem between pilot and engine)")
    ap.add_argument("--secret", default=None, help="the run's secret (default: RUN/secret, the pilot's directory "
                    "being RUN/pilots/ID)")
    ap.add_argument("--transport", default="spool", choices=["spool", "redis"], help="how events travel")
    ap.add_argument("--broker", default=None, help="redis://host:port/db (--transport redis)")
    ap.add_argument("--broker-password-file", default=None, help="an owner-only file with the broker's password")
    args = ap.parse_args(argv)
    try:
        check(PILOT_SETTINGS)  # (a bad PWE_* value: one line in the pilot's log, exit status 2)
    except ValueError as exc:
        ap.exit(2, f"python -m pilot: {exc}\n")
    try:
        alloc = discover(hosts=args.hosts, hostfile=args.hostfile, cores=args.slots, walltime_minutes=args.walltime,
                         gpus_per_node=args.gpus_per_node, memory_per_node=args.memory_per_node)
    except (ValueError, OSError) as exc:  # a node that is no host name, a host file that cannot be read
        ap.exit(2, f"python -m pilot: the allocation's nodes: {exc}\n")
    if args.margin is None:
        args.margin = min(60.0, args.walltime * 6) if args.walltime else 60.0
    os.chdir(args.dir)
    directory = os.path.abspath(args.dir)
    try:
        key_out, key_in = keys(directory, args.secret)
        # the pilot's guardian (pilot/guardian.py): this process waits, a child is the pilot
        # (forked before anything is opened that only the pilot may use)
        table = guard(directory, key_out, 4096, tidy=lambda pid: remove_left(directory, args.scratch, pid))
        faults.arm("pilot")  # (PWE_FAULT: tests stop the pilot at a write of its own; pilot/faults.py)
        transport: Transport
        if args.transport == "redis":
            from .broker import PilotRedis, read_password

            password = read_password(args.broker_password_file) if args.broker_password_file else None
            transport = PilotRedis(directory, args.broker or "", password, args.fsync, key_out, key_in)
        else:
            transport = PilotSpool(directory, args.fsync, key_out, key_in)
    except (ValueError, OSError) as exc:  # a secret or password others may read, a broker URL that is none
        ap.exit(2, f"python -m pilot: {exc}\n")
    pilot = PilotAgent(directory, alloc, args.heartbeat, args.idle_timeout, args.fsync,
                  launcher=args.launcher, launcher_prefix=args.launcher_prefix, core_cap=args.core_cap,
                  margin=args.margin, spawners=args.spawners, transport=transport, scratch=args.scratch,
                  tmp_per_node=args.tmp_per_node, table=table, orphan_key=key_out)
    sys.exit(pilot.run())


def await_start() -> None:
    """``python -m pilot --await-start`` (protocols/local.py): the pilot's interpreter and
    imports done first, while the engine plans; then one JSON line on stdin gives the
    command line, the environment, the working directory and the log, and the pilot goes
    on as if started with them. End-of-file, or no order within ORDER_WAIT seconds: its run
    did not need it (a run that is not local, an engine that stopped); it leaves."""
    ready, _, _ = select.select([sys.stdin], [], [], ORDER_WAIT)
    line = sys.stdin.buffer.readline() if ready else b""
    if not line.strip():
        sys.exit(0)
    order = json.loads(line)
    os.environ.clear()
    os.environ.update(order["env"])
    log = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, onto in ((null, 0), (log, 1), (log, 2)):
        os.dup2(fd, onto)
    os.close(log)
    os.close(null)
    os.chdir(order["cwd"])
    main(order["argv"])


if __name__ == "__main__":
    if sys.argv[1:] == ["--await-start"]:
        await_start()
    else:
        main()
