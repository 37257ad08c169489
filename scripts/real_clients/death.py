"""A dead rank under torchrun (issue 18): rank 1 runs a few verified
iterations of all_reduce + a send/recv exchange, then dies with os._exit(0)
(exit code 0 so that torchrun does not stop rank 0 itself). Rank 0 keeps
iterating; how long it takes to learn of the death is what this measures:
with Ferry its next wait fails within milliseconds (ProcessGroupNCCL's
watchdog then reports ncclRemoteError); with NVIDIA's NCCL it waits for the
process group's timeout (--pg-timeout, 60 s). Rank 0 prints
"NOTICED <seconds since the death> <error>" if it gets control back;
scripts/real_clients.sh (stage death) also records torchrun's end.
CLIENT_EMULATE_HOSTS=1: each rank its own emulated host (NCCL_HOSTID), GPUs
shared: the death crosses hosts (network connections), on one GPU.
"""
import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--pg-timeout", type=float, default=60)
    ap.add_argument("--stamp", default="/tmp/ferry-death-stamp")
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    if os.environ.get("CLIENT_EMULATE_HOSTS") == "1":
        os.environ["NCCL_HOSTID"] = "death-host-%s" % os.environ["RANK"]
        local %= torch.cuda.device_count()
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=timedelta(seconds=a.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    it = 0
    try:
        while True:
            if rank == 1 and it == a.iters:
                with open(a.stamp, "w") as f:
                    f.write(repr(time.time()))
                print(f"DEATH rank 1 after {it} iterations", flush=True)
                os._exit(0)
            x = torch.full((1 << 20,), float(rank + it), device=device)
            dist.all_reduce(x)
            want = sum(r + it for r in range(world))
            out = torch.full((1 << 22,), float(rank * 10 + it), device=device)
            inp = torch.full((1 << 22,), float("nan"), device=device)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                           dist.P2POp(dist.irecv, inp, prv)])
            for r in reqs:
                r.wait()
            torch.cuda.synchronize()
            if it < a.iters and not (torch.all(x == want) and torch.all(inp == prv * 10 + it)):
                print(f"rank {rank}: iteration {it} WRONG", flush=True)
            it += 1
    except Exception as e:  # the error a dead peer must produce
        died = float(open(a.stamp).read()) if os.path.exists(a.stamp) else float("nan")
        print(f"NOTICED {time.time() - died:.3f} {type(e).__name__}: {str(e)[:300]}", flush=True)
        os._exit(3)


if __name__ == "__main__":
    main()
