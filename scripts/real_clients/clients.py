"""Real-client suite: PyTorch's own parallelism APIs over whichever
libnccl.so.2 the process loaded (device machine only).

Launched by scripts/real_clients.sh once per (library, mode), e.g.
  LD_PRELOAD=$PWD/build/libnccl.so.2 torchrun --nproc-per-node 2 \
      scripts/real_clients/clients.py --tag ferry-lazy --expect ferry
Every case uses fresh random data, poisons outputs first where it owns them,
and checks results against a reference computed independently (a one-GPU
model, or values derived from the sender's identity). Each rank prints one
"RESULT {json}" line per case; summarize.py merges ranks and runs into a table.
A case that runs past --case-timeout dumps every Python stack and ends the
process (a hang is a failure, never a stuck suite).

Cases: pipe.<Schedule> (torch.distributed.pipelining, 2 ranks, shapes
inferred at run time; for 3 SGD steps the merged output, the per-micro-batch
losses and the gradients of the last-stage rank's stages are checked against
the same model on one GPU, then step time, host time and comm_ms: the
step's CPU inside dist.batch_isend_irecv; a schedule listed twice runs again
in the same process as pipe.<Schedule>~2; CLIENT_PROFILE_STEP=1 profiles one
more step of each group with torch.profiler, CLIENT_TRACE_DIR keeps their
traces (trace_gaps.py reads them); CLIENT_AB_ENV
runs it again on one more group per ';'-separated variant of extra
settings, steps interleaved: pipe.<Schedule>+B, +C, ... with b_over_a; each result lists the threads that used
the most CPU), fsdp2 (fully_shard, Adam; losses
and the gathered parameters checked against a one-GPU model), ddp (gradients
checked), a2a (uneven all_to_all_single, MoE-dispatch sized, new tensors
every iteration, compared exactly; with CLIENT_AB_ENV also a2a+B, ... on
variant groups, iterations interleaved, with b_over_a), batch (batch_isend_irecv ring, exact),
blocking (send/recv in pipeline order), groups and p2pgroups (64 extra
communicators used by an all_reduce and a send/recv ring, or by the ring
only: memory held and set-up time; not in the default list), shrink
(torch's shrink_group on a group of every rank without the last one, then
a checked all_reduce on the new group; issue 19), symm (tensors from
torch's symmetric memory with the NCCL backend: ncclMemAlloc + window
registration, then a checked all_reduce and send/recv ring on them),
overlap (issue 16: bf16 8192^3 matmuls beside 40 x 256 MiB of
batch_isend_irecv, then of all_to_all_single, from a side stream; the
matmuls' slowdown against the same matmuls alone in the same round),
graph and graphp2p (torch.cuda.graph capturing the collectives, or a
batch_isend_irecv ring and an all_reduce, replayed on new data and checked
exactly; graph_case.py), torchapi and mesh (the rest of the API surface:
every reduce op and dtype, rooted and list collectives, object
collectives, the coalescing manager, fp8, complex, counts above 2^31; and
DeviceMesh / DTensor redistributes, functional collectives, tensor
parallelism beside a one-device model, FSDP2 x TP on 4+ ranks; api_case.py).
CLIENT_EMULATE_HOSTS=1: each rank claims its own host (NCCL_HOSTID, read
by both libraries) and ranks share the GPUs there are, so one GPU runs the
suite across two emulated hosts over loopback sockets (correctness, API
paths; never speed). Every rank uses the same seed
(--seed, or CLIENT_SEED, default 4242): each rank regenerates the others'
data, so a seed that differed between ranks would be a test bug.
"""
import argparse
import copy
import faulthandler
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

from common import (H, TIME_STEPS, Reporter, VariantGroups, ab_variants, library_in_use, mse,
                    rel_err, seeded, slowest_median, split_train, sync_max)
import api_case
import graph_case
from pipe_case import LOOPED, SINGLE, V_SHAPED, case_pipe
from procutil import pin_near_gpu


# ---- FSDP2 ---------------------------------------------------------------------


def fsdp_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(H, H), nn.ReLU()]
    return nn.Sequential(*layers)


def case_fsdp2(rep: Reporter, rank: int, world: int, device, seed: int):
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    base = fsdp_model(seed)
    model = copy.deepcopy(base).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    ref = copy.deepcopy(base).to(device)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-4)
    rows = 2048
    losses, worst, ok, t0 = [], 0.0, True, 0.0
    for step in range(5 + TIME_STEPS):
        if step == 5:
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
        xs = [seeded(seed + 7919 * step + r, rows, H, device=device) for r in range(world)]
        ys = [seeded(seed + 7919 * step + r + 97, rows, H, device=device) for r in range(world)]
        loss = mse(model(xs[rank]), ys[rank])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step < 5:
            # FSDP averages gradients over ranks: the reference loss is the
            # mean of every rank's loss on the full model.
            ref_opt.zero_grad(set_to_none=True)
            ref_losses = [mse(ref(xs[r]), ys[r]) for r in range(world)]
            (sum(ref_losses) / world).backward()
            ref_opt.step()
            got, want = loss.item(), ref_losses[rank].item()
            losses.append(got)
            rel = abs(got - want) / max(abs(want), 1e-12)
            worst = max(worst, rel)
            if not rel < 1e-3:
                ok = False
                print(f"rank {rank}: fsdp2 step {step}: loss {got!r} reference {want!r}", flush=True)
        if step == 4:
            # The parameters themselves (gathered from every rank's shard):
            # wrong gradients would move them elsewhere than the one-GPU model.
            for p, q in zip(model.parameters(), ref.parameters()):
                full = p.full_tensor() if hasattr(p, "full_tensor") else p
                err = rel_err(full.detach(), q.detach())
                worst = max(worst, err)
                if not err < 1e-2:
                    ok = False
                    print(f"rank {rank}: fsdp2 parameter rel err {err}", flush=True)
    torch.cuda.synchronize()
    step_ms = sync_max((time.perf_counter() - t0) * 1000 / TIME_STEPS, device)
    rep.emit("fsdp2", ok, step_ms=round(step_ms, 3), losses=losses, max_rel_err=worst)


# ---- DDP -----------------------------------------------------------------------


def case_ddp(rep: Reporter, rank: int, world: int, device, seed: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(seed)
    base = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))
    model = DDP(copy.deepcopy(base).to(device), device_ids=[device.index])
    ref = copy.deepcopy(base).to(device)
    ok, t0, worst = True, 0.0, 0.0
    for step in range(3 + TIME_STEPS):
        if step == 3:
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
        xs = [seeded(seed + 31 * step + r, 512, 1024, device=device) for r in range(world)]
        model.zero_grad(set_to_none=True)
        model(xs[rank]).square().mean().backward()
        if step < 3:
            ref.zero_grad(set_to_none=True)
            (sum(ref(x).square().mean() for x in xs) / world).backward()
            for (n, p), q in zip(model.module.named_parameters(), ref.parameters()):
                rel = ((p.grad - q.grad).norm() / q.grad.norm().clamp_min(1e-12)).item()
                worst = max(worst, rel)
                if not rel < 1e-4:
                    ok = False
                    print(f"rank {rank}: ddp step {step} {n}: rel err {rel}", flush=True)
    torch.cuda.synchronize()
    step_ms = sync_max((time.perf_counter() - t0) * 1000 / TIME_STEPS, device)
    rep.emit("ddp", ok, step_ms=round(step_ms, 3), grad_rel_err=worst)


# ---- all_to_all_single, uneven ---------------------------------------------------


def a2a_block(src: int, dst: int, rows: int, cols: int, device) -> torch.Tensor:
    """Block src -> dst: small integers, exact in bf16, unique per (src, dst)."""
    r = torch.arange(rows, device=device).unsqueeze(1)
    c = torch.arange(cols, device=device).unsqueeze(0)
    return (((r * 3 + c) % 61) + 64 * src + 128 * dst).to(torch.bfloat16)


def warm_a2a(group, world: int, device):
    """One small all_to_all_single on `group`: torch makes a group's
    communicator at its first collective."""
    t = torch.arange(world, device=device, dtype=torch.float32)
    dist.all_to_all_single(torch.empty_like(t), t, group=group)
    torch.cuda.synchronize()


def case_a2a(rep: Reporter, rank: int, world: int, device, seed: int):
    """Uneven all_to_all_single, new tensors every iteration, compared
    exactly. With CLIENT_AB_ENV each iteration also runs on one group per
    variant (a2a+B, ...; VariantGroups), on the same input, in rotating
    order: b_over_a is a setting's effect on the call's time inside this
    process."""
    # CLIENT_A2A_ROWS: the largest block, in rows (many ranks sharing one GPU
    # run out of its memory at the default: 16 ranks on one H200).
    cols, iters, max_rows = 1024, 24, int(os.environ.get("CLIENT_A2A_ROWS", "70000"))
    trace = os.environ.get("CLIENT_A2A_TRACE") == "1"
    groups = VariantGroups("a2a", world, lambda group, *_: warm_a2a(group, world, device))
    n = len(groups.labels)
    ok, times, host = [True] * n, [[] for _ in range(n)], [[] for _ in range(n)]
    g = torch.Generator().manual_seed(seed)
    for it in range(iters):
        split = torch.randint(0, max_rows + 1, (world, world), generator=g).tolist()
        send_rows = split[rank]
        recv_rows = [split[p][rank] for p in range(world)]
        inp = torch.cat([a2a_block(rank, p, send_rows[p], cols, device) for p in range(world)])
        want = torch.cat([a2a_block(p, rank, recv_rows[p], cols, device) for p in range(world)])
        for k in groups.order(it):
            out = torch.full((sum(recv_rows), cols), float("nan"), device=device,
                             dtype=torch.bfloat16)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            h0 = time.perf_counter()
            dist.all_to_all_single(out, inp, output_split_sizes=recv_rows,
                                   input_split_sizes=send_rows, group=groups.groups[k])
            h1 = time.perf_counter()
            end.record()
            end.synchronize()
            if it >= 4:
                times[k].append(start.elapsed_time(end))
                host[k].append((h1 - h0) * 1000)
            if trace:  # each call's CPU and GPU time, between the library's log lines
                print(f"A2A rank {rank} {groups.labels[k]} iteration {it}: host_ms "
                      f"{(h1 - h0) * 1000:.2f} gpu_ms {start.elapsed_time(end):.2f}", flush=True)
            if not torch.equal(out, want):
                ok[k] = False
                print(f"rank {rank}: {groups.labels[k]} iteration {it} WRONG (splits {split})",
                      flush=True)
            del out
        del inp, want
    for k, label in enumerate(groups.labels):
        # host_ms: the call itself on the CPU (this rank's median, then the max).
        fields = {"median_ms": slowest_median(times[k], device),
                  "host_ms": slowest_median(host[k], device), "iters": iters,
                  "max_rows": max_rows}
        fields.update(groups.ab_fields(k, times, lambda v: sync_max(v, device)))
        rep.emit(label, ok[k], **fields)
    torch.cuda.synchronize()
    groups.destroy()


# ---- batch_isend_irecv and blocking send/recv ----------------------------------------


def case_batch(rep: Reporter, rank: int, world: int, device, seed: int):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    ok, fields = True, {}

    def one(n, it, synced):
        """One batch of n floats: (GPU ms, CPU ms, correct). synced: both
        ranks start together (a barrier, then an idle GPU), so the GPU time
        holds no wait for the other rank's CPU."""
        out = seeded(seed + 100 * rank + it, n, device=device)
        inp = torch.full((n,), float("nan"), device=device)
        if synced:
            dist.barrier()
            torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        h0 = time.perf_counter()
        ops = [dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.irecv, inp, prv)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        h1 = time.perf_counter()
        end.record()
        end.synchronize()
        good = torch.equal(inp, seeded(seed + 100 * prv + it, n, device=device))
        if not good:
            print(f"rank {rank}: batch_isend_irecv {n * 4} B iteration {it} WRONG", flush=True)
        return start.elapsed_time(end), (h1 - h0) * 1000, good

    for n in [1024, 256 << 10, 4 << 20, 64 << 20]:  # floats: 4 KiB .. 256 MiB
        runs = [one(n, it, False) for it in range(8)]
        ok = ok and all(r[2] for r in runs)
        fields[f"ms_{n * 4}B"] = slowest_median([r[0] for r in runs[2:]], device)
        # The CPU's time to issue the batch and its waits (the timed interval
        # starts on an idle GPU, so it holds this too).
        fields[f"host_ms_{n * 4}B"] = slowest_median([r[1] for r in runs[2:]], device)
    for n in [1024, 256 << 10]:
        runs = [one(n, 8 + it, True) for it in range(6)]
        ok = ok and all(r[2] for r in runs)
        fields[f"synced_ms_{n * 4}B"] = slowest_median([r[0] for r in runs[2:]], device)
    rep.emit("batch", ok, **fields)


def case_blocking(rep: Reporter, rank: int, world: int, device, seed: int):
    """Pipeline order: rank r receives from r-1, then sends to r+1 (rank 0
    starts), activations forward then gradients backward, new kernels in
    between (the reduction below is launched once per iteration)."""
    # 20 iterations (6 until session 54), so that the median is a steady
    # state worth comparing between libraries (this case's lazy-loading
    # gap: NOTES.md Next (0a)).
    n, ok, times, host = 4 << 20, True, [], []

    def timed(fn, *args):  # adds the call's CPU time to this iteration's
        h0 = time.perf_counter()
        fn(*args)
        host[-1] += (time.perf_counter() - h0) * 1000

    for it in range(20):
        start = time.perf_counter()
        host.append(0.0)
        act = seeded(seed + it, n, device=device) if rank == 0 else torch.full(
            (n,), float("nan"), device=device)
        if rank > 0:
            timed(dist.recv, act, rank - 1)
        act = act * 1.5 + rank
        if rank < world - 1:
            timed(dist.send, act, rank + 1)
        grad = torch.full((n,), float("nan"), device=device) if rank < world - 1 else act.clone()
        if rank < world - 1:
            timed(dist.recv, grad, rank + 1)
        if rank > 0:
            timed(dist.send, grad * 0.5, rank - 1)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
        # Independent reference: what rank 0's gradient must be.
        want = seeded(seed + it, n, device=device)
        for r in range(world):
            want = want * 1.5 + r
        for _ in range(world - 1):
            want = want * 0.5
        if rank == 0 and not torch.allclose(grad, want, rtol=1e-6, atol=1e-5):
            ok = False
            print(f"rank 0: blocking send/recv iteration {it} WRONG", flush=True)
    # host_ms: the CPU time of this rank's send/recv calls in a step.
    rep.emit("blocking", ok, median_ms=slowest_median(times, device),
             host_ms=slowest_median(host, device))


# ---- CUDA graphs (graph_case.py) ------------------------------------------------


def case_graph(rep: Reporter, rank: int, world: int, device, seed: int):
    graph_case.case_graph(rep, rank, world, device, seed, p2p=False)


def case_graphp2p(rep: Reporter, rank: int, world: int, device, seed: int):
    graph_case.case_graph(rep, rank, world, device, seed, p2p=True)


# ---- the rest of the API surface (api_case.py) ----------------------------------


def case_torchapi(rep: Reporter, rank: int, world: int, device, seed: int):
    api_case.case_torchapi(rep, rank, world, device, seed)


def case_mesh(rep: Reporter, rank: int, world: int, device, seed: int):
    api_case.case_mesh(rep, rank, world, device, seed)


# ---- compute beside SM-free traffic (issue 16) ---------------------------------


def overlap_kind(kind, rank, world, device, seed, mm, cpu_group, rounds=5, iters=40,
                 span_ms=None):
    """bf16 8192^3 matmuls on the default stream beside `iters` x 256 MiB of
    `kind` traffic (batch_isend_irecv ring or all_to_all_single; "nothing":
    the control, no traffic, the measurement's own bias) issued from a side
    stream. Each round keeps one unbroken train of individually timed
    matmuls queued (a warm-up of >= 150 ms, as many as the traffic's solo
    time before it, more until it has ended, then as many again after it)
    and starts the traffic once the ones before it have run: the matmuls
    wholly inside the traffic's span against those wholly outside it (as
    ferry-bench --overlap, bench/ferry_bench/overlap.cc). The GPU never
    idles, so its power state holds steady (the older method, separate
    bursts around a barrier, read x0.986-x1.033 with nothing beside). The
    slowdown is the median of the rounds; the worst rank's."""
    n = 64 << 20  # floats: 256 MiB
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    salt = {"sendrecv": 1, "alltoall": 2, "nothing": 3}[kind]
    sbuf = seeded(seed + 1000 * rank + salt, n, device=device)
    rbuf = torch.empty(n, device=device)
    if kind == "sendrecv":
        want = seeded(seed + 1000 * prv + salt, n, device=device)
    elif kind == "alltoall":  # chunk p of the output is chunk `rank` of rank p's input
        want = torch.cat([seeded(seed + 1000 * p + salt, n, device=device).view(world, -1)[rank]
                          for p in range(world)])
    side = torch.cuda.Stream(device)

    def traffic(count):
        with torch.cuda.stream(side):
            for _ in range(count):
                if kind == "sendrecv":
                    ops = [dist.P2POp(dist.isend, sbuf, nxt), dist.P2POp(dist.irecv, rbuf, prv)]
                    for req in dist.batch_isend_irecv(ops):
                        req.wait()
                elif kind == "alltoall":
                    dist.all_to_all_single(rbuf, sbuf, async_op=True).wait()

    def event(stream):
        e = torch.cuda.Event(enable_timing=True)
        e.record(stream)
        return e

    ok = True
    if span_ms is None:
        traffic(3)  # connections, staging buffers
        torch.cuda.synchronize()
        t0 = event(side)
        traffic(iters)
        t1 = event(side)
        torch.cuda.synchronize()
        span_ms = sync_max(t0.elapsed_time(t1), device)
    gemms = max(2, int(span_ms / mm.ms_per_gemm + 0.999))
    warm = max(gemms, int(150 / mm.ms_per_gemm))
    ahead = max(2, gemms // 2)  # matmuls kept queued beside the traffic
    slowdowns, comm_beside = [], []
    for r in range(rounds):
        if kind != "nothing":
            rbuf.fill_(float("nan"))
        torch.cuda.synchronize()
        main = torch.cuda.current_stream()
        train = [event(main)]

        def extend(count):
            for _ in range(count):
                mm.enqueue(1)
                train.append(event(main))

        extend(warm + 2 * gemms)
        train[warm + gemms].synchronize()  # the matmuls alone before it have run
        dist.barrier(group=cpu_group)  # CPU only: the default stream is busy
        c0 = event(side)
        traffic(iters)
        c1 = event(side)
        while not c1.query() and len(train) < warm + 100 * gemms:
            if train[-1 - ahead].query():
                extend(ahead)
        extend(2 * gemms)  # alone after it (and a control's solo span)
        torch.cuda.synchronize()
        start = train[0]
        at = [start.elapsed_time(e) for e in train]
        lo = start.elapsed_time(c0)
        hi = max(start.elapsed_time(c1), lo + span_ms)
        beside, alone = split_train(at, warm, lo, hi)
        slowdowns.append(beside / alone)
        comm_beside.append((start.elapsed_time(c1) - lo) / iters)
        if kind != "nothing" and not torch.equal(rbuf, want):
            ok = False
            print(f"rank {rank}: overlap {kind} round {r} WRONG", flush=True)
    bus = (world - 1) / world if kind == "alltoall" else 1.0
    gbps = lambda ms: round(n * 4 * bus / (ms * 1e-3) / 1e9, 1)
    slowdowns.sort()
    fields = {f"{kind}_slowdown": slowest_median(slowdowns, device),
              f"{kind}_slowdowns": [round(x, 4) for x in slowdowns],
              f"{kind}_gemms": gemms}
    if kind != "nothing":
        fields[f"{kind}_gbps_alone"] = gbps(span_ms / iters)
        fields[f"{kind}_gbps_beside"] = gbps(sync_max(sorted(comm_beside)[rounds // 2], device))
    return ok, fields, span_ms


class Matmuls:
    """bf16 8192^3 matmuls on the current stream, random inputs (constant data
    draws less power and would flatter every library)."""

    def __init__(self, seed, device):
        self.a = (seeded(seed, 8192, 8192, device=device) * 0.1).to(torch.bfloat16)
        self.b = (seeded(seed + 1, 8192, 8192, device=device) * 0.1).to(torch.bfloat16)
        self.c = torch.empty_like(self.a)
        self.time(5)
        self.ms_per_gemm = self.time(20) / 20

    def enqueue(self, count):
        for _ in range(count):
            torch.mm(self.a, self.b, out=self.c)

    def time(self, count):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.enqueue(count)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


def case_overlap(rep: Reporter, rank: int, world: int, device, seed: int):
    mm = Matmuls(seed, device)
    fields = {"tflops_alone": round(2 * 8192 ** 3 / (mm.ms_per_gemm * 1e-3) / 1e12, 1)}
    ok = True
    cpu_group = dist.new_group(backend="gloo")  # a barrier that waits on no stream
    rounds = int(os.environ.get("CLIENT_OVERLAP_ROUNDS", "5"))
    iters = int(os.environ.get("CLIENT_OVERLAP_ITERS", "40"))
    span_ms = None
    # "nothing" last: its window is as long as the sendrecv's traffic.
    for kind in ("sendrecv", "alltoall", "nothing"):
        good, f, span = overlap_kind(kind, rank, world, device, seed, mm, cpu_group, rounds=rounds,
                                     iters=iters, span_ms=span_ms if kind == "nothing" else None)
        span_ms = span if kind == "sendrecv" else span_ms
        ok, fields = ok and good, {**fields, **f}
    rep.emit("overlap", ok, **fields)


def run_groups(rep: Reporter, name: str, rank: int, world: int, device, seed: int,
               collectives: bool):
    """Many communicators (issue 19): CLIENT_GROUPS (64) torch groups over
    every rank, as a framework builds for its data, tensor, pipeline and
    expert groups, each used once by a batch_isend_irecv ring and, with
    `collectives`, an all_reduce (both checked). Reports the set-up time
    (groups + first use) and the device memory they hold: the drop of free
    device memory, which counts the library's own allocations (torch's cache
    adds a few MiB for the tensors)."""
    n = int(os.environ.get("CLIENT_GROUPS", "64"))
    torch.cuda.synchronize()
    dist.barrier()
    free0 = torch.cuda.mem_get_info(device)[0]
    start = time.perf_counter()
    groups = [dist.new_group(list(range(world))) for _ in range(n)]
    ok = True
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for i, g in enumerate(groups):
        if collectives:
            x = seeded(seed + 1000 * i + rank, 1024, device=device)
            dist.all_reduce(x, group=g)
            want = sum(seeded(seed + 1000 * i + r, 1024, device=device) for r in range(world))
            ok = ok and torch.allclose(x, want, rtol=1e-5, atol=1e-5)
        out = seeded(seed + 1000 * i + 500 + rank, 4096, device=device)
        inp = torch.full((4096,), float("nan"), device=device)
        ops = [dist.P2POp(dist.isend, out, nxt, group=g), dist.P2POp(dist.irecv, inp, prv, group=g)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        ok = ok and torch.equal(inp, seeded(seed + 1000 * i + 500 + prv, 4096, device=device))
    torch.cuda.synchronize()
    setup = time.perf_counter() - start
    held = (free0 - torch.cuda.mem_get_info(device)[0]) / 2**20
    if not ok:
        print(f"rank {rank}: a group's all_reduce or ring exchange was WRONG", flush=True)
    rep.emit(name, ok, groups=n, setup_s=round(sync_max(setup, device), 3),
             held_mib=round(sync_max(held, device), 1),
             mib_per_group=round(sync_max(held, device) / n, 2))
    for g in groups:
        dist.destroy_process_group(g)


def case_shrink(rep: Reporter, rank: int, world: int, device, seed: int):
    """shrink_group (ncclCommShrink): a group of every rank, used once, loses
    its last rank; the others all_reduce on the new group (checked). Only
    the remaining ranks call it, as torch requires."""
    g = dist.new_group(list(range(world)))
    x = seeded(seed + rank, 1024, device=device)
    dist.all_reduce(x, group=g)
    ok = torch.allclose(x, sum(seeded(seed + r, 1024, device=device) for r in range(world)),
                        rtol=1e-5, atol=1e-5)
    torch.cuda.synchronize()
    fields = {}
    if rank != world - 1:
        start = time.perf_counter()
        small = dist.distributed_c10d.shrink_group([world - 1], group=g)
        fields["shrink_s"] = round(time.perf_counter() - start, 3)
        y = seeded(seed + 77 + rank, 4096, device=device)
        dist.all_reduce(y, group=small)
        want = sum(seeded(seed + 77 + r, 4096, device=device) for r in range(world - 1))
        ok = ok and torch.allclose(y, want, rtol=1e-5, atol=1e-5)
        fields["new_size"] = dist.get_world_size(small)
        ok = ok and fields["new_size"] == world - 1
        torch.cuda.synchronize()
        # torch retires the shrunk group on the ranks that shrank it (its
        # destroy then raises "Invalid process group specified", under
        # NVIDIA's NCCL too): only the new group is theirs to destroy.
        dist.destroy_process_group(small)
    else:
        dist.destroy_process_group(g)
    torch.cuda.synchronize()
    dist.barrier()
    rep.emit("shrink", ok, **fields)


def case_symm(rep: Reporter, rank: int, world: int, device, seed: int):
    """Symmetric memory with the NCCL backend (ncclMemAlloc, then a window
    registered at rendezvous): an all_reduce in place and a send/recv ring
    on such tensors, both checked. torch 2.11's rendezvous also creates an
    NCCL device communicator (ncclDevCommCreate, NCCL's device API), which
    Ferry does not have yet (and NVIDIA's NCCL refuses across emulated
    hosts): under Ferry this case fails there until the device API exists."""
    import torch.distributed._symmetric_memory as symm_mem
    symm_mem.set_backend("NCCL")
    n = 1 << 20
    t = symm_mem.empty(n, dtype=torch.float32, device=device)
    symm_mem.rendezvous(t, group=dist.group.WORLD)
    t.copy_(seeded(seed + 5 + rank, n, device=device))
    dist.all_reduce(t)
    ok = torch.allclose(t, sum(seeded(seed + 5 + r, n, device=device) for r in range(world)),
                        rtol=1e-5, atol=1e-5)
    out = symm_mem.empty(n, dtype=torch.float32, device=device)
    inp = symm_mem.empty(n, dtype=torch.float32, device=device)
    symm_mem.rendezvous(out, group=dist.group.WORLD)
    symm_mem.rendezvous(inp, group=dist.group.WORLD)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out.copy_(seeded(seed + 9 + rank, n, device=device))
    inp.fill_(float("nan"))
    for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                       dist.P2POp(dist.irecv, inp, prv)]):
        req.wait()
    ok = ok and torch.equal(inp, seeded(seed + 9 + prv, n, device=device))
    torch.cuda.synchronize()
    rep.emit("symm", ok)


def case_groups(rep: Reporter, rank: int, world: int, device, seed: int):
    """Groups used by an all_reduce (4 KiB) and a send/recv ring."""
    run_groups(rep, "groups", rank, world, device, seed, collectives=True)


def case_p2pgroups(rep: Reporter, rank: int, world: int, device, seed: int):
    """Groups used only by a send/recv ring: with Ferry's rings on first use
    (NCCL_RUNTIME_CONNECT=1) they hold no collective FIFOs."""
    run_groups(rep, "p2pgroups", rank, world, device, seed, collectives=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="run")
    ap.add_argument("--expect", choices=["ferry", "nccl", "any"], default="any")
    ap.add_argument("--cases", default="pipe,fsdp2,ddp,a2a,batch,blocking,overlap,graph,graphp2p,torchapi,mesh")
    ap.add_argument("--schedules", default=",".join(SINGLE + LOOPED + V_SHAPED))
    ap.add_argument("--case-timeout", type=float, default=240)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CLIENT_SEED", "4242")))
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    if os.environ.get("CLIENT_EMULATE_HOSTS") == "1":
        # Each rank its own host: both libraries read NCCL_HOSTID at init.
        os.environ["NCCL_HOSTID"] = "clients-host-%s" % os.environ["RANK"]
        local %= torch.cuda.device_count()
    device = torch.device("cuda", local)
    pinned = pin_near_gpu(local)  # before any library thread exists
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    lib = library_in_use()
    rep = Reporter(rank, a.tag, lib)
    if a.expect != "any" and lib != a.expect:
        rep.emit("library", False, error=f"expected {a.expect}, loaded {lib}")
        sys.exit(1)
    cases, extra = [], []
    for c in a.cases.split(","):
        if c == "pipe":
            # A schedule listed again runs again in this process as
            # pipe.NAME~2, ~3...: whether a run's speed is the process's
            # (runs of one library differ by 30-50%) or the moment's.
            seen = {}
            for s in a.schedules.split(","):
                seen[s] = seen.get(s, 0) + 1
                name = f"pipe.{s}" + (f"~{seen[s]}" if seen[s] > 1 else "")
                cases.append((name, lambda s=s, name=name: case_pipe(rep, s, rank, world, device,
                                                                   a.seed, case=name)))
                extra += [f"{name}+{letter}" for letter, _ in ab_variants()]  # the same case's
        else:
            fn = globals()["case_" + c]
            cases.append((c, lambda fn=fn: fn(rep, rank, world, device, a.seed)))
            if c == "a2a":  # CLIENT_AB_ENV's variants of it
                extra += [f"a2a+{letter}" for letter, _ in ab_variants()]
    # planned: the cases this run owes a result for (summarize.py fails a
    # planned case without one, and leaves the others out).
    rep.emit("library", True, nccl_version=".".join(map(str, torch.cuda.nccl.version())),
             torch=torch.__version__, loading=os.environ.get("CUDA_MODULE_LOADING", "(torch default)"),
             seed=a.seed, cpus=pinned, planned=[name for name, _ in cases] + extra)
    for name, run in cases:
        print(f"CASE {name} start (rank {rank})", flush=True)
        faulthandler.dump_traceback_later(a.case_timeout, exit=True)
        try:
            run()
        except Exception as e:  # a failed case is reported; the next one still runs
            traceback.print_exc()
            rep.emit(name, False, error=f"{type(e).__name__}: {e}"[:500])
        faulthandler.cancel_dump_traceback_later()
        print(f"CASE {name} end (rank {rank})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
