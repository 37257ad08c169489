"""The real-client suite's CUDA-graph cases: torch.cuda.graph captures
communication (as vLLM's and SGLang's decode graphs, Megatron-LM's CUDA
graphs do), then replays it on fresh data.

graph: all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
broadcast in one graph. graphp2p: a batch_isend_irecv ring exchange and an
all_reduce in one graph. Both at 256 KiB and 16 MiB per rank, captured in
torch's default (global) capture mode after one eager warm-up on a side
stream (as torch's documentation asks). Every replay gets new inputs
copied into the static tensors and poisoned outputs, and each output is
compared exactly with a reference: the inputs are small integers in fp32,
so every sum is exact whatever the order of the adds. Reports the mean
replay time (ms) per size.
"""
import time

import torch
import torch.distributed as dist

from common import Reporter, ints, slowest_median

REPLAYS = 6     # checked replays (each with new inputs)
TIMED = 20      # replays timed back to back, after the checked ones


class Plan:
    """One graph's static tensors, how to fill them for a replay, and what
    each output must hold afterwards."""

    def __init__(self, p2p: bool, n: int, rank: int, world: int, device, seed: int):
        self.p2p, self.n, self.rank, self.world, self.device = p2p, n, rank, world, device
        self.seed = seed
        self.ar = torch.empty(n, device=device)
        if p2p:
            self.send, self.recv = torch.empty(n, device=device), torch.empty(n, device=device)
        else:
            self.ag_in, self.ag_out = torch.empty(n, device=device), torch.empty(n * world, device=device)
            self.rs_in, self.rs_out = torch.empty(n * world, device=device), torch.empty(n, device=device)
            self.bc = torch.empty(n, device=device)

    def data(self, r: int, what: int, it: int, n: int) -> torch.Tensor:
        return ints(self.seed + 1_000_003 * it + 7919 * r + 104_729 * what, n, self.device)

    def fill(self, it: int):
        """Inputs of replay `it` (every rank can regenerate every rank's);
        outputs poisoned."""
        n, r = self.n, self.rank
        self.ar.copy_(self.data(r, 0, it, n))
        if self.p2p:
            self.send.copy_(self.data(r, 1, it, n))
            self.recv.fill_(float("nan"))
            return
        self.ag_in.copy_(self.data(r, 2, it, n))
        self.ag_out.fill_(float("nan"))
        self.rs_in.copy_(self.data(r, 3, it, n * self.world))
        self.rs_out.fill_(float("nan"))
        self.bc.copy_(self.data(r, 4, it, n) if r == 0 else torch.full_like(self.bc, float("nan")))

    def issue(self):
        """The communication the graph holds (also its eager warm-up)."""
        dist.all_reduce(self.ar)
        if self.p2p:
            nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
            ops = [dist.P2POp(dist.isend, self.send, nxt), dist.P2POp(dist.irecv, self.recv, prv)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            return
        dist.all_gather_into_tensor(self.ag_out, self.ag_in)
        dist.reduce_scatter_tensor(self.rs_out, self.rs_in)
        dist.broadcast(self.bc, 0)

    def wrong(self, it: int) -> list:
        """The outputs that differ from their reference after replay `it`."""
        n, w, r = self.n, self.world, self.rank
        bad = []
        if not torch.equal(self.ar, sum(self.data(q, 0, it, n) for q in range(w))):
            bad.append("all_reduce")
        if self.p2p:
            if not torch.equal(self.recv, self.data((r - 1) % w, 1, it, n)):
                bad.append("recv")
            return bad
        if not torch.equal(self.ag_out, torch.cat([self.data(q, 2, it, n) for q in range(w)])):
            bad.append("all_gather")
        want = sum(self.data(q, 3, it, n * w)[r * n:(r + 1) * n] for q in range(w))
        if not torch.equal(self.rs_out, want):
            bad.append("reduce_scatter")
        if not torch.equal(self.bc, self.data(0, 4, it, n)):
            bad.append("broadcast")
        return bad


def case_graph(rep: Reporter, rank: int, world: int, device, seed: int, p2p: bool):
    name = "graphp2p" if p2p else "graph"
    ok, fields = True, {}
    for n in [64 << 10, 4 << 20]:  # floats: 256 KiB and 16 MiB per rank
        plan = Plan(p2p, n, rank, world, device, seed + n)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # the eager warm-up, checked too
            plan.fill(0)
            plan.issue()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        bad = plan.wrong(0)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan.issue()
        torch.cuda.synchronize(device)
        for it in range(1, REPLAYS + 1):
            plan.fill(it)
            graph.replay()
            torch.cuda.synchronize(device)
            bad += [f"{what} (replay {it})" for what in plan.wrong(it)]
        if bad:
            ok = False
            print(f"rank {rank}: {name} {n * 4} B WRONG: {', '.join(bad[:6])}", flush=True)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(TIMED):
            graph.replay()
        torch.cuda.synchronize(device)
        fields[f"replay_ms_{n * 4}B"] = slowest_median(
            [(time.perf_counter() - start) * 1000 / TIMED], device)
        del graph
    rep.emit(name, ok, **fields)
