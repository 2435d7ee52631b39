"""``twinrun train SPEC --backend trl --launch``: start the spec's training processes (torchrun), one command for
1 or N processes.

The process count is the spec's (``resources.processes``, else nodes x gpus_per_node, one process per node on CPU;
``twinrun plan`` divides the batch by it). One process: train in this one. N processes on one node: re-execute the
same command line (without ``--launch``) under ``python -m torch.distributed.run --standalone --nproc_per_node N``
(gloo on CPU, NCCL on GPU, chosen by accelerate). Several nodes: run the same command on every node with
``NODE_RANK``, ``MASTER_ADDR`` (and optionally ``MASTER_PORT``) set, as ``experiments/cluster/trl-launch.sh`` does.
Inside a launched world (``WORLD_SIZE`` set by torchrun or accelerate) ``--launch`` does nothing: train.py checks
that the world is the spec's size.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from twinrun.core.errors import TwinrunError

LAUNCH_FLAG = "--launch"


def launched(environ: Mapping[str, str]) -> bool:
    """True inside a torchrun / accelerate world (the launcher set WORLD_SIZE)."""
    return "WORLD_SIZE" in environ


def torchrun_argv(processes: int, nodes: int, argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The command line that starts this node's share of ``processes`` training processes running ``argv`` (the
    `twinrun` arguments, ``--launch`` removed)."""
    if processes % nodes:
        raise TwinrunError(f"resources.processes: {processes} is not a multiple of resources.nodes = {nodes} "
                           "(fix: the same number of processes on every node)")
    args = [a for a in argv if a != LAUNCH_FLAG]
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes // nodes)]
    if nodes == 1:
        run += ["--standalone", "--nnodes", "1"]
    else:
        missing = [k for k in ("NODE_RANK", "MASTER_ADDR") if not environ.get(k)]
        if missing:
            raise TwinrunError(f"--launch: resources.nodes = {nodes} needs {' and '.join(missing)} in the environment "
                               "(fix: export NODE_RANK=0..N-1 and MASTER_ADDR=<node 0's address> on every node)")
        run += ["--nnodes", str(nodes), "--node_rank", environ["NODE_RANK"], "--master_addr", environ["MASTER_ADDR"],
                "--master_port", environ.get("MASTER_PORT", "29500")]
    return run + ["-m", "twinrun.cli", *args]


def launch(processes: int, nodes: int, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> bool:
    """Replace this process by the launcher when the spec asks for more than one process and no world exists yet;
    returns False when the caller should train in this process."""
    environ = os.environ if environ is None else environ
    if launched(environ) or processes == 1 and nodes == 1:
        return False
    cmd = torchrun_argv(processes, nodes, argv, environ)
    print(f"twinrun: launching {processes} training processes: {' '.join(cmd)}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)  # signals (a kill, Ctrl-C) reach torchrun, which stops every rank
    return True  # not reached
