"""The real-client suite's API-surface cases: the parts of torch.distributed
that frameworks and user code call besides the big training loops, each
checked element-wise against a reference computed here from every rank's
inputs (which every rank can regenerate).

torchapi: all_reduce with every reduce op (SUM, AVG, MAX, MIN, PRODUCT and
PREMUL_SUM with a host and a device factor) over 8 dtypes; reduce,
broadcast, gather and scatter at a root that is not 0; list forms
(all_gather, reduce_scatter, all_to_all) with equal and unequal sizes;
the object collectives; torch's coalescing manager (as DDP and FSDP1
batch their collectives); fp8 and complex tensors; counts above 2^31
elements (uint8: broadcast, all_reduce, send/recv).

mesh: DeviceMesh and DTensor, as tensor parallelism and torch.compile use
them: redistributes (all_gather, all_to_all, all_reduce, reduce_scatter),
the functional collectives, a ColwiseParallel/RowwiseParallel MLP trained
beside the same model on one device, and with 4 or more ranks a 2D mesh
(FSDP2 over the data dimension, tensor parallel over the other).

Each case reports the parts that were wrong or raised (a part that raises
does not stop the others).
"""
import copy
import os
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

from common import Reporter, ints

BIG = (1 << 31) + 4099   # elements: above INT32_MAX, not a multiple of anything


class Parts:
    """Runs a case's parts; a part returns a list of what was wrong."""

    def __init__(self, rank: int, name: str):
        self.rank, self.name, self.bad, self.errors = rank, name, [], []

    def run(self, part: str, fn):
        try:
            self.bad += [f"{part}: {w}" for w in fn()]
        except Exception as e:  # one part's error must not hide the others' results
            traceback.print_exc()
            self.errors.append(f"{part}: {type(e).__name__}: {e}"[:200])
        torch.cuda.synchronize()

    def emit(self, rep: Reporter, **fields):
        if self.bad:
            print(f"rank {self.rank}: {self.name} WRONG: {'; '.join(self.bad[:8])}", flush=True)
        problems = self.bad + self.errors
        if problems:  # the table shows `error`; the log line has every problem
            fields["error"] = f"{len(problems)} wrong or raised, first: {problems[0]}"
        rep.emit(self.name, not problems, wrong_parts=self.bad[:12], errors=self.errors[:6],
                 **fields)


# ---- torchapi ---------------------------------------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64,
          torch.int8, torch.uint8]


def op_data(seed: int, r: int, n: int, dtype, op: str, device):
    """Rank r's input for `op`: small enough that the result fits `dtype`."""
    if op == "prod":
        lo, hi = (1, 3) if dtype == torch.uint8 else (-2, 3)
    else:
        lo, hi = (0, 16) if dtype == torch.uint8 else (-8, 8)
    return ints(seed + 7919 * r, n, device, lo, hi, dtype)


def reduce_ref(inputs, op: str, world: int, dtype):
    """The reduction in float64 (exact for these inputs), then as `dtype`."""
    s = torch.stack([x.double() for x in inputs])
    want = {"sum": s.sum(0), "avg": s.sum(0) / world, "max": s.amax(0), "min": s.amin(0),
            "prod": s.prod(0), "premul": 0.5 * s.sum(0), "premul_t": 0.25 * s.sum(0)}[op]
    return want.to(dtype)


def torch_op(op: str, device):
    if op == "premul":
        return dist._make_nccl_premul_sum(0.5)
    if op == "premul_t":
        return dist._make_nccl_premul_sum(torch.tensor([0.25], dtype=torch.float64, device=device))
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}[op]


def part_ops(rank, world, device, seed):
    """all_reduce with every op and dtype; reduce_scatter_tensor and reduce
    with some (4099 elements a rank: no multiple of a vector width)."""
    bad, n = [], 4099
    for d, dtype in enumerate(DTYPES):
        ops = ["sum", "max", "min", "prod"]
        if dtype.is_floating_point:
            ops += ["avg"]
        # Not bf16: torch 2.11 hands the library a bf16 premul factor that does
        # not read as 0.5 (NVIDIA's NCCL and Ferry give the same sums, session 48).
        if dtype.is_floating_point and dtype != torch.bfloat16:
            ops += ["premul"] + (["premul_t"] if dtype == torch.float64 else [])
        for k, op in enumerate(ops):
            s = seed + 1000 * d + 100 * k
            inputs = [op_data(s, r, n, dtype, op, device) for r in range(world)]
            x = inputs[rank].clone()
            dist.all_reduce(x, op=torch_op(op, device))
            if not torch.equal(x, reduce_ref(inputs, op, world, dtype)):
                bad.append(f"all_reduce {op} {dtype}")
    for d, dtype in enumerate([torch.float32, torch.bfloat16, torch.int32]):
        ops = ["sum", "max"] + (["avg"] if dtype.is_floating_point else [])
        for k, op in enumerate(ops + (["premul"] if dtype == torch.float32 else [])):
            s = seed + 50_000 + 1000 * d + 100 * k
            inputs = [op_data(s, r, n * world, dtype, op, device) for r in range(world)]
            out = torch.full((n,), 99, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(out, inputs[rank], op=torch_op(op, device))
            want = reduce_ref(inputs, op, world, dtype)[rank * n:(rank + 1) * n]
            if not torch.equal(out, want):
                bad.append(f"reduce_scatter_tensor {op} {dtype}")
    root = world - 1
    inputs = [op_data(seed + 60_000, r, n, torch.float32, "max", device) for r in range(world)]
    x = inputs[rank].clone()
    dist.reduce(x, root, op=dist.ReduceOp.MAX)
    if rank == root and not torch.equal(x, reduce_ref(inputs, "max", world, torch.float32)):
        bad.append("reduce max")
    return bad


def part_rooted(rank, world, device, seed):
    """broadcast, reduce, gather and scatter with the root at the last rank
    and at rank 0."""
    bad, n = [], 12_345
    data = lambda r, what: ints(seed + 31 * r + 1009 * what, n, device)
    for root in sorted({world - 1, 0}):
        x = data(rank, 1) if rank == root else torch.full((n,), float("nan"), device=device)
        dist.broadcast(x, root)
        if not torch.equal(x, data(root, 1)):
            bad.append(f"broadcast root {root}")
        x = data(rank, 2)
        dist.reduce(x, root)
        if rank == root and not torch.equal(x, sum(data(r, 2) for r in range(world))):
            bad.append(f"reduce root {root}")
        got = [torch.full((n,), float("nan"), device=device) for _ in range(world)]
        dist.gather(data(rank, 3), got if rank == root else None, dst=root)
        if rank == root and any(not torch.equal(got[r], data(r, 3)) for r in range(world)):
            bad.append(f"gather root {root}")
        out = torch.full((n,), float("nan"), device=device)
        chunks = [data(root, 10 + r) for r in range(world)] if rank == root else None
        dist.scatter(out, chunks, src=root)
        if not torch.equal(out, data(root, 10 + rank)):
            bad.append(f"scatter root {root}")
    return bad


def part_lists(rank, world, device, seed):
    """all_gather, reduce_scatter and all_to_all in their list forms, with
    equal sizes and with a different size per rank."""
    bad = []
    size = lambda r, uneven: 5000 + (977 * r if uneven else 0)
    data = lambda r, what, m: ints(seed + 131 * r + 7 * what, m, device)
    for uneven in (False, True):
        tag = "unequal" if uneven else "equal"
        got = [torch.full((size(r, uneven),), float("nan"), device=device) for r in range(world)]
        dist.all_gather(got, data(rank, 1, size(rank, uneven)))
        if any(not torch.equal(got[r], data(r, 1, size(r, uneven))) for r in range(world)):
            bad.append(f"all_gather {tag}")
        # reduce_scatter: rank q's chunk for rank r has size(r); its sum lands on r
        chunks = [data(rank * 10 + r, 2, size(r, uneven)) for r in range(world)]
        out = torch.full((size(rank, uneven),), float("nan"), device=device)
        dist.reduce_scatter(out, chunks)
        want = sum(data(q * 10 + rank, 2, size(rank, uneven)) for q in range(world))
        if not torch.equal(out, want):
            bad.append(f"reduce_scatter {tag}")
        # all_to_all: rank q sends rank r a block of 300 + 211 q + 97 r elements
        blk = lambda q, r: (300 + 211 * q + 97 * r) if uneven else 4000
        send = [data(rank * 100 + r, 3, blk(rank, r)) for r in range(world)]
        recv = [torch.full((blk(q, rank),), float("nan"), device=device) for q in range(world)]
        dist.all_to_all(recv, send)
        if any(not torch.equal(recv[q], data(q * 100 + rank, 3, blk(q, rank))) for q in range(world)):
            bad.append(f"all_to_all {tag}")
    out2d = torch.full((world, 3000), float("nan"), device=device)
    dist.all_gather_into_tensor(out2d, data(rank, 4, 3000))
    if any(not torch.equal(out2d[r], data(r, 4, 3000)) for r in range(world)):
        bad.append("all_gather_into_tensor (world, n)")
    return bad


def part_objects(rank, world, device, seed):
    """The object collectives (pickles moved as byte tensors of different
    lengths), with roots other than 0."""
    bad = []
    obj = lambda r: {"rank": r, "seed": seed, "payload": list(range(r * 37 + 5)), "name": "x" * r}
    got = [None] * world
    dist.all_gather_object(got, obj(rank))
    if got != [obj(r) for r in range(world)]:
        bad.append("all_gather_object")
    root = world - 1
    lst = [obj(root), "text", 3.5] if rank == root else [None, None, None]
    dist.broadcast_object_list(lst, src=root)
    if lst != [obj(root), "text", 3.5]:
        bad.append("broadcast_object_list")
    got = [None] * world if rank == 0 else None
    dist.gather_object(obj(rank), got, dst=0)
    if rank == 0 and got != [obj(r) for r in range(world)]:
        bad.append("gather_object")
    out = [None]
    dist.scatter_object_list(out, [obj(100 + r) for r in range(world)] if rank == root else None,
                             src=root)
    if out[0] != obj(100 + rank):
        bad.append("scatter_object_list")
    return bad


def part_coalesced(rank, world, device, seed):
    """torch's coalescing manager: several all_reduces (DDP's and FSDP1's
    buckets), all_gather_into_tensors and reduce_scatter_tensors, each set
    launched as one group."""
    bad = []
    sizes = [1, 4099, 1 << 20]
    data = lambda r, what, m: ints(seed + 17 * r + 1013 * what, m, device)
    xs = [data(rank, k, m) for k, m in enumerate(sizes)]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    for k, m in enumerate(sizes):
        if not torch.equal(xs[k], sum(data(r, k, m) for r in range(world))):
            bad.append(f"coalesced all_reduce {m}")
    outs = [torch.full((m * world,), float("nan"), device=device) for m in sizes]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        for k, m in enumerate(sizes):
            dist.all_gather_into_tensor(outs[k], data(rank, 10 + k, m))
    cm.wait()
    for k, m in enumerate(sizes):
        if not torch.equal(outs[k], torch.cat([data(r, 10 + k, m) for r in range(world)])):
            bad.append(f"coalesced all_gather_into_tensor {m}")
    outs = [torch.full((m,), float("nan"), device=device) for m in sizes]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        for k, m in enumerate(sizes):
            dist.reduce_scatter_tensor(outs[k], data(rank, 20 + k, m * world))
    cm.wait()
    for k, m in enumerate(sizes):
        want = sum(data(r, 20 + k, m * world) for r in range(world))[rank * m:(rank + 1) * m]
        if not torch.equal(outs[k], want):
            bad.append(f"coalesced reduce_scatter_tensor {m}")
    return bad


def part_types(rank, world, device, seed):
    """fp8 (bit-exact moves, and sums of small integers, exact in both
    formats) and complex tensors."""
    bad, n = [], 8195
    for dtype in [torch.float8_e4m3fn, torch.float8_e5m2]:
        # compared and poisoned as bytes: few CUDA ops take fp8 tensors
        data = lambda r, what: ints(seed + 29 * r + 3 * what, n, device, -2, 3).to(dtype)
        poison = lambda m: torch.full((m,), 0x7F, dtype=torch.uint8, device=device).view(dtype)
        out = poison(n * world)
        dist.all_gather_into_tensor(out, data(rank, 1))
        if not torch.equal(out.view(torch.uint8),
                           torch.cat([data(r, 1).view(torch.uint8) for r in range(world)])):
            bad.append(f"all_gather_into_tensor {dtype}")
        x = data(rank, 2) if rank == world - 1 else poison(n)
        dist.broadcast(x, world - 1)
        if not torch.equal(x.view(torch.uint8), data(world - 1, 2).view(torch.uint8)):
            bad.append(f"broadcast {dtype}")
        if world <= 4:  # |sum| <= 8: exact in e4m3 and e5m2
            x = data(rank, 3)
            dist.all_reduce(x)
            want = sum(data(r, 3).float() for r in range(world)).to(dtype)
            if not torch.equal(x.view(torch.uint8), want.view(torch.uint8)):
                bad.append(f"all_reduce {dtype}")
    for dtype in [torch.complex64, torch.complex128]:
        data = lambda r: torch.complex(ints(seed + 3 * r, n, device), ints(seed + 3 * r + 1, n, device)).to(dtype)
        x = data(rank)
        dist.all_reduce(x)
        if not torch.equal(x, sum(data(r) for r in range(world))):
            bad.append(f"all_reduce {dtype}")
    return bad


def part_big(rank, world, device, seed):
    """uint8 counts above 2^31 (the count is a size_t in the API): a
    broadcast, an all_reduce (sums wrap mod 256 in torch and in the library
    alike) and a ring send/recv."""
    bad = []
    g = torch.Generator(device=device)
    data = lambda r, what: torch.randint(0, 256, (BIG,), dtype=torch.uint8, device=device,
                                         generator=g.manual_seed(seed + 11 * r + what))
    x = data(rank, 1) if rank == 0 else torch.zeros(BIG, dtype=torch.uint8, device=device)
    dist.broadcast(x, 0)
    if not torch.equal(x, data(0, 1)):
        bad.append(f"broadcast {BIG} B")
    x = data(rank, 2)
    dist.all_reduce(x)
    want = data(0, 2)
    for r in range(1, world):
        want += data(r, 2)  # uint8 adds wrap, as the library's do
    if not torch.equal(x, want):
        bad.append(f"all_reduce {BIG} B")
    del want
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    x.zero_()
    out = data(rank, 3)
    for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                       dist.P2POp(dist.irecv, x, prv)]):
        req.wait()
    if not torch.equal(x, data(prv, 3)):
        bad.append(f"send/recv {BIG} B")
    return bad


def case_torchapi(rep: Reporter, rank: int, world: int, device, seed: int):
    parts = Parts(rank, "torchapi")
    todo = [("ops", part_ops), ("rooted", part_rooted), ("lists", part_lists),
            ("objects", part_objects), ("coalesced", part_coalesced), ("types", part_types)]
    fields = {}
    # ~10 GiB of device memory per rank: CLIENT_API_BIG=0 leaves it out where
    # many ranks share one GPU (reported as skipped, never as passed).
    if os.environ.get("CLIENT_API_BIG", "1") != "0":
        todo.append(("big", part_big))
    else:
        fields["skipped"] = "big (CLIENT_API_BIG=0)"
    for name, fn in todo:
        parts.run(name, lambda fn=fn: fn(rank, world, device, seed))
    torch.cuda.empty_cache()
    parts.emit(rep, **fields)


# ---- mesh -------------------------------------------------------------------------------------

def part_redistribute(mesh, rank, world, device, seed):
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    bad = []
    full = ints(seed + 1, 24 * world * 40 * world, device).view(24 * world, 40 * world)
    d = distribute_tensor(full, mesh, [Shard(0)])
    if not torch.equal(d.to_local(), full.chunk(world, 0)[rank]):
        bad.append("Shard(0) local chunk")
    if not torch.equal(d.redistribute(mesh, [Replicate()]).to_local(), full):
        bad.append("Shard(0) -> Replicate (all_gather)")
    s1 = d.redistribute(mesh, [Shard(1)])
    if not torch.equal(s1.to_local(), full.chunk(world, 1)[rank]):
        bad.append("Shard(0) -> Shard(1) (all_to_all)")
    if not torch.equal(s1.full_tensor(), full):
        bad.append("Shard(1).full_tensor")
    part = lambda r: ints(seed + 100 + r, 24 * world * 8, device).view(24 * world, 8)
    p = DTensor.from_local(part(rank), mesh, [Partial()])
    total = sum(part(r) for r in range(world))
    if not torch.equal(p.redistribute(mesh, [Replicate()]).to_local(), total):
        bad.append("Partial -> Replicate (all_reduce)")
    p = DTensor.from_local(part(rank), mesh, [Partial()])
    if not torch.equal(p.redistribute(mesh, [Shard(0)]).to_local(), total.chunk(world, 0)[rank]):
        bad.append("Partial -> Shard(0) (reduce_scatter)")
    return bad


def part_funcol(mesh, rank, world, device, seed):
    import torch.distributed._functional_collectives as funcol
    bad, n = [], 6000
    done = lambda t: t.wait() if hasattr(t, "wait") else t  # AsyncCollectiveTensor
    data = lambda r, what, m=n: ints(seed + 37 * r + 5 * what, m, device)
    got = funcol.all_reduce(data(rank, 1), "sum", mesh)
    if not torch.equal(done(got), sum(data(r, 1) for r in range(world))):
        bad.append("all_reduce")
    got = funcol.all_gather_tensor(data(rank, 2), 0, mesh)
    if not torch.equal(done(got), torch.cat([data(r, 2) for r in range(world)])):
        bad.append("all_gather_tensor")
    got = funcol.reduce_scatter_tensor(data(rank, 3, n * world), "sum", 0, mesh)
    want = sum(data(r, 3, n * world) for r in range(world))[rank * n:(rank + 1) * n]
    if not torch.equal(done(got), want):
        bad.append("reduce_scatter_tensor")
    got = funcol.all_to_all_single(data(rank, 4, n * world), None, None, mesh)
    want = torch.cat([data(r, 4, n * world)[rank * n:(rank + 1) * n] for r in range(world)])
    if not torch.equal(done(got), want):
        bad.append("all_to_all_single")
    return bad


def mlp(seed: int, device) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(device)


def close(a, b) -> bool:
    return torch.allclose(a.float(), b.float(), rtol=2e-4, atol=2e-5)


def part_tp(mesh, rank, world, device, seed):
    """Colwise then Rowwise linear layers (Megatron's MLP split) trained 3
    steps beside the whole model on this device."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    bad = []
    ref = mlp(seed, device)
    tp = parallelize_module(copy.deepcopy(ref), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt_tp = torch.optim.SGD(tp.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(64, 256, device=device, generator=torch.Generator(device=device).manual_seed(seed + step))
        y_ref, y_tp = ref(x), tp(x)
        if not close(y_tp, y_ref):
            bad.append(f"step {step} output")
        y_ref.square().mean().backward()
        y_tp.square().mean().backward()
        for (name, p_ref), p_tp in zip(ref.named_parameters(), tp.parameters()):
            g = p_tp.grad.full_tensor() if hasattr(p_tp.grad, "full_tensor") else p_tp.grad
            if not close(g, p_ref.grad):
                bad.append(f"step {step} grad {name}")
        opt_ref.step(), opt_tp.step()
        opt_ref.zero_grad(), opt_tp.zero_grad()
    return bad


def part_2d(rank, world, device, seed):
    """FSDP2 over "dp" and tensor parallel over "tp" on a (world/2, 2) mesh,
    3 Adam steps; each dp rank takes its own slice of the batch, the
    reference takes all of it (equal slices: the mean of the slices' mean
    losses is the whole batch's)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    bad, dp = [], world // 2
    mesh = init_device_mesh("cuda", (dp, 2), mesh_dim_names=("dp", "tp"))
    ref = mlp(seed + 5, device)
    model = parallelize_module(copy.deepcopy(ref), mesh["tp"],
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    me = mesh.get_local_rank("dp")
    for step in range(3):
        x = torch.randn(16 * dp, 256, device=device,
                        generator=torch.Generator(device=device).manual_seed(seed + 50 + step))
        loss_ref = ref(x).square().mean()
        loss = model(x.chunk(dp)[me]).square().mean()
        total = loss.detach().clone()
        dist.all_reduce(total, group=mesh["dp"].get_group())
        if not torch.allclose(total / dp, loss_ref.detach(), rtol=1e-4, atol=1e-6):
            bad.append(f"step {step} loss {float(total / dp):.6g} vs {float(loss_ref):.6g}")
        loss_ref.backward()
        loss.backward()
        opt_ref.step(), opt.step()
        opt_ref.zero_grad(), opt.zero_grad()
    return bad


def case_mesh(rep: Reporter, rank: int, world: int, device, seed: int):
    from torch.distributed.device_mesh import init_device_mesh
    parts = Parts(rank, "mesh")
    mesh = init_device_mesh("cuda", (world,))
    for name, fn in [("redistribute", part_redistribute), ("funcol", part_funcol), ("tp", part_tp)]:
        parts.run(name, lambda fn=fn: fn(mesh, rank, world, device, seed))
    fields = {}
    if world >= 4 and world % 2 == 0:
        parts.run("2d", lambda: part_2d(rank, world, device, seed))
    else:
        fields["skipped"] = f"2d mesh needs an even world of 4 or more (world {world})"
    parts.emit(rep, **fields)
