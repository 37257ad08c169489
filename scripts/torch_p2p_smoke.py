"""PyTorch through Ferry's libnccl.so.2 (device machine only).

Run, from the repository root, with two GPUs:
  LD_PRELOAD=$PWD/build/libnccl.so.2 torchrun --nproc-per-node 2 scripts/torch_p2p_smoke.py
(or through scripts/device_p2p.sh's `torch` stage). Each check uses fresh
random data, poisons outputs with NaN first, and compares element-wise with a
reference computed here from every rank's (seeded, reproducible) input.
Checks: batch_isend_irecv, blocking send/recv in pipeline order, all_reduce
(sum, avg, max; small and large), all_gather_into_tensor,
reduce_scatter_tensor, broadcast, barrier, all_to_all_single, and a few DDP
steps whose gradients must match a single-process computation.
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def seeded(seed: int, n: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).to(dtype)


class Checker:
    def __init__(self, rank: int):
        self.rank = rank
        self.failures = 0

    def expect(self, name: str, got: torch.Tensor, want: torch.Tensor, tol: float = 0.0):
        got = got.float().cpu()
        want = want.float().cpu()
        ok = got.shape == want.shape and (
            torch.equal(got, want) if tol == 0 else torch.allclose(got, want, rtol=tol, atol=tol))
        if not ok:
            bad = (got != want).sum().item() if got.shape == want.shape else -1
            print(f"rank {self.rank}: {name} WRONG ({bad} elements differ)", flush=True)
            self.failures += 1


def check_p2p(c: Checker, rank: int, world: int, seed: int):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for r, n in enumerate([1, 1000, 1 << 20, (1 << 24) + 3]):
        out = seeded(seed + 100 * rank + r, n).cuda()
        inp = torch.full((n,), float("nan"), device="cuda")
        ops = [dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.irecv, inp, prv)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        torch.cuda.synchronize()
        c.expect(f"batch_isend_irecv {n}", inp, seeded(seed + 100 * prv + r, n))
    n = 4 << 20
    out, inp = seeded(seed + 100 * rank + 9, n).cuda(), torch.empty(n, device="cuda")
    if rank % 2 == 0:
        dist.send(out, nxt)
        dist.recv(inp, prv)
    else:
        dist.recv(inp, prv)
        dist.send(out, nxt)
    torch.cuda.synchronize()
    c.expect("send/recv pipeline order", inp, seeded(seed + 100 * prv + 9, n))


def check_collectives(c: Checker, rank: int, world: int, seed: int):
    for r, n in enumerate([1, 17, 4096, 65536 + 5, (1 << 22) + 1]):
        inputs = [seeded(seed + 1000 * q + r, n) for q in range(world)]
        for op, ref in ((dist.ReduceOp.SUM, sum(inputs)),
                        (dist.ReduceOp.MAX, torch.stack(inputs).max(0).values),
                        (dist.ReduceOp.AVG, sum(inputs) / world)):
            t = inputs[rank].cuda()
            dist.all_reduce(t, op=op)
            # Sum order differs from ours on > 2 ranks: allow float rounding.
            c.expect(f"all_reduce {op} {n}", t, ref, tol=1e-5)
        out = torch.full((n * world,), float("nan"), device="cuda")
        dist.all_gather_into_tensor(out, inputs[rank].cuda())
        c.expect(f"all_gather {n}", out, torch.cat(inputs))
        big = [seeded(seed + 2000 * q + r, n * world) for q in range(world)]
        rs = torch.full((n,), float("nan"), device="cuda")
        dist.reduce_scatter_tensor(rs, big[rank].cuda())
        c.expect(f"reduce_scatter {n}", rs, sum(big)[rank * n:(rank + 1) * n], tol=1e-5)
        b = inputs[rank].cuda() if rank == 1 % world else torch.full((n,), float("nan"), device="cuda")
        dist.broadcast(b, src=1 % world)
        c.expect(f"broadcast {n}", b, inputs[1 % world])
    dist.barrier()
    n = 1000
    send = [seeded(seed + 3000 + 10 * rank + q, n) for q in range(world)]
    out = torch.full((n * world,), float("nan"), device="cuda")
    dist.all_to_all_single(out, torch.cat(send).cuda())
    c.expect("all_to_all_single", out,
             torch.cat([seeded(seed + 3000 + 10 * q + rank, n) for q in range(world)]))


def check_ddp(c: Checker, rank: int, world: int, seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    ref = [p.detach().clone() for p in model.parameters()]
    ddp = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[torch.cuda.current_device()])
    xs = [seeded(seed + 50 + q, 32 * 64).view(32, 64) for q in range(world)]
    loss = ddp(xs[rank].cuda()).square().mean()
    loss.backward()
    # Reference: the mean over ranks of each rank's gradient, on the CPU.
    cpu = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    with torch.no_grad():
        for p, r in zip(cpu.parameters(), ref):
            p.copy_(r)
    grads = None
    for x in xs:
        cpu.zero_grad()
        cpu(x).square().mean().backward()
        g = [p.grad.clone() for p in cpu.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
    for i, (p, g) in enumerate(zip(ddp.parameters(), grads)):
        c.expect(f"DDP gradient {i}", p.grad, g / world, tol=1e-4)


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        ctypes.CDLL(None).ncclFerryGetRuntime  # only Ferry exports it
        lib = "Ferry"
    except AttributeError:
        lib = "not Ferry (check LD_PRELOAD)"
    seed = int(os.environ.get("FERRY_TEST_SEED", "12345"))
    c = Checker(rank)
    for name, fn in (("p2p", check_p2p), ("collectives", check_collectives), ("ddp", check_ddp)):
        try:
            fn(c, rank, world, seed)
        except Exception as e:  # report and go on: one broken check must not hide the rest
            print(f"rank {rank}: {name} raised {type(e).__name__}: {e}", flush=True)
            c.failures += 1
    verdict = "PASS" if c.failures == 0 else f"FAIL ({c.failures})"
    print(f"{verdict} rank {rank}: torch through {lib}", flush=True)
    dist.destroy_process_group()
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
