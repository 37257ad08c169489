"""The real-client suite's pipelining case: torch.distributed.pipelining
schedules over 2 ranks against the same model on one GPU, timed, with
CLIENT_AB_ENV's in-process variants (clients.py's docstring says what is
reported)."""
import copy
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from common import (H, TIME_STEPS, Reporter, VariantGroups, mse, rel_err, seeded, slowest_median,
                    sync_max, upper_median)
from procutil import busy_threads, pin_main_thread, thread_cpu

MB_ROWS = 2048      # rows per micro-batch: 2048 x 4096 bf16 = 16 MiB activations
N_MB = 8            # micro-batches per step
CHECK_STEPS = 3     # steps whose losses are compared with the reference
FIRST_STEPS = 15    # the default timed window (first_step_ms with more timed steps)
LR = 0.05

SINGLE = ["GPipe", "1F1B"]
LOOPED = ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"]
V_SHAPED = ["ZBVZeroBubble", "DualPipeV"]


def stage_module(index: int, seed: int) -> nn.Module:
    torch.manual_seed(seed * 100 + index)
    return nn.Sequential(nn.Linear(H, H), nn.GELU(), nn.Linear(H, H), nn.GELU()).to(torch.bfloat16)


def stages_of(name: str, rank: int, world: int):
    if name in SINGLE:
        return world, [rank]
    if name in V_SHAPED:
        return 2 * world, [rank, 2 * world - 1 - rank]
    return 2 * world, [rank, rank + world]


def pipe_batch(seed: int, step: int, device):
    x = seeded(seed * 1000 + step, N_MB * MB_ROWS, H, dtype=torch.bfloat16, device=device)
    y = seeded(seed * 1000 + step + 500, N_MB * MB_ROWS, H, dtype=torch.bfloat16, device=device)
    return x, y


def reference_step(ref: nn.Module, x, y):
    """The same schedule's arithmetic on one GPU: per-micro-batch outputs
    and losses, gradients scaled by 1/N_MB (the schedules' scale_grads)."""
    ref.zero_grad(set_to_none=True)
    losses, outputs = [], []
    for xs, ys in zip(x.chunk(N_MB), y.chunk(N_MB)):
        out = ref(xs)
        loss = mse(out, ys)
        (loss / N_MB).backward()
        losses.append(loss.detach().float())
        outputs.append(out.detach())
    return torch.stack(losses), torch.cat(outputs)


def check_pipe_step(case, rank, mine, stages, ref, x, y, out, losses):
    """On the rank with the last stage: the schedule's merged output and
    losses, and the gradients of this rank's stages, against the one-GPU
    model (activations or gradients moved wrongly change all three far
    beyond bf16 rounding). Returns the worst relative error."""
    want_losses, want_out = reference_step(ref, x, y)
    errs = [rel_err(torch.stack([l.detach().float().reshape(()) for l in losses]), want_losses)
            if len(losses) == N_MB else float("inf"),
            rel_err(out, want_out) if out is not None else float("inf")]
    for st, s in zip(stages, mine):
        for p, q in zip(st.submod.parameters(), ref[s].parameters()):
            errs.append(rel_err(p.grad, q.grad) if p.grad is not None else float("inf"))
    worst = max(errs)
    if not worst < 2e-2:
        print(f"rank {rank}: {case}: loss/output/gradient relative errors {errs}", flush=True)
    return worst


class CommClock:
    """CPU time spent inside dist.batch_isend_irecv, the one call through
    which the pipelining schedules move activations and gradients (the
    library enqueues there: ncclGroupEnd), accumulated until read. The
    schedules look it up on the torch.distributed module at each call, so
    wrapping the module's attribute sees every one; results pass through.
    Not isend/irecv: P2POp checks its op against the original functions,
    and batch_isend_irecv calls them itself. Also wrapped where it is
    defined (distributed_c10d), for code that calls it by that name; each
    wrapper calls the original, so no call counts twice. comm_calls 0 in
    a result means the schedules reached it some other way."""

    NAME = "batch_isend_irecv"

    def __init__(self):
        self.seconds, self.calls, self.saved = 0.0, 0, []

    def __enter__(self):
        import torch.distributed.distributed_c10d as c10d
        for module in (dist, c10d):
            fn = getattr(module, self.NAME, None)
            if fn is None:
                continue
            self.saved.append((module, fn))

            def timed(*args, _fn=fn, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - t0
                    self.calls += 1
            setattr(module, self.NAME, timed)
        return self

    def __exit__(self, *exc):
        for module, fn in self.saved:
            setattr(module, self.NAME, fn)

    def take(self):
        """(ms, calls) since the last take."""
        out = (self.seconds * 1000, self.calls)
        self.seconds, self.calls = 0.0, 0
        return out


class PipeRun:
    """One schedule on one process group (None: the default one): this
    rank's stages, their optimizer, and on the last stage's rank the same
    model on one GPU, its reference; reported as `label`."""

    def __init__(self, pp, name, rank, world, device, seed, label, group=None):
        cls = getattr(pp, "Schedule" + name)
        self.label, self.worst = label, 0.0
        self.nstages, self.mine = stages_of(name, rank, world)
        mods = {s: stage_module(s, seed) for s in range(self.nstages)}
        self.stages = [pp.PipelineStage(copy.deepcopy(mods[s]).to(device), s, self.nstages, device,
                                        group=group) for s in self.mine]
        self.sched = cls(self.stages if name not in SINGLE else self.stages[0],
                         n_microbatches=N_MB, loss_fn=mse, scale_grads=True)
        self.opt = torch.optim.SGD([p for st in self.stages for p in st.submod.parameters()], lr=LR)
        self.first, self.last = 0 in self.mine, self.nstages - 1 in self.mine
        self.ref = self.ref_opt = None
        if self.last:
            self.ref = nn.Sequential(*[copy.deepcopy(mods[s]) for s in range(self.nstages)]).to(device)
            self.ref_opt = torch.optim.SGD(self.ref.parameters(), lr=LR)
        self.step_times, self.host_times, self.comm_times, self.comm_calls = [], [], [], []

    def step(self, rank, seed, step, device, timed=True):
        """One schedule step: checked against the reference while step <
        CHECK_STEPS (the worst relative error kept in self.worst), timed
        after (into this run's lists, unless timed=False)."""
        if step >= CHECK_STEPS:  # each timed step alone: its median is robust to one slow step
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
        x, y = pipe_batch(seed, step, device)
        losses = []
        args = (x,) if self.first else ()
        kwargs = {"target": y, "losses": losses} if self.last else {}
        self.opt.zero_grad(set_to_none=True)
        out = self.sched.step(*args, **kwargs)
        if step < CHECK_STEPS and self.last:
            self.worst = max(self.worst, check_pipe_step(self.label, rank, self.mine, self.stages,
                                                         self.ref, x, y, out, losses))
            self.ref_opt.step()
        self.opt.step()
        if step >= CHECK_STEPS and timed:
            # host_ms: the step's Python and library calls on the CPU. Close
            # to step_ms means the CPU, not the GPU, sets the pace, and a
            # library's CPU cost per call shows in the step time.
            self.host_times.append((time.perf_counter() - t0) * 1000)
            torch.cuda.synchronize()
            self.step_times.append((time.perf_counter() - t0) * 1000)

    def fields(self, device) -> dict:
        """step_ms and host_ms (the slowest rank's medians), comm_ms: the
        step's CPU inside the p2p calls (the library's enqueue cost, torch's
        own included), this rank's median; a part of host_ms."""
        out = {"step_ms": slowest_median(self.step_times, device, 3),
               "host_ms": slowest_median(self.host_times, device, 3),
               "comm_ms": round(upper_median(self.comm_times), 3),
               "comm_calls": max(self.comm_calls)}
        if len(self.step_times) > FIRST_STEPS:
            # With CLIENT_TIME_STEPS above the default: the first steps'
            # median too, the default measurement's window, so that one run
            # tells a warm-up (mappings, staging growth) from the steady state.
            out["first_step_ms"] = slowest_median(self.step_times[:FIRST_STEPS], device, 3)
            # This rank's first steps one by one: the warm-up's shape.
            out["head_ms"] = [round(t, 2) for t in self.step_times[:2 * FIRST_STEPS]]
        return out


def case_pipe(rep: Reporter, name: str, rank: int, world: int, device, seed: int, case=None):
    """CLIENT_AB_ENV="VAR=value ...[; VAR=value ...]": the same schedule also
    runs on one more group of the same ranks per ';'-separated variant,
    whose communicators are made with those words in the environment
    (pipe.NAME+B, +C, ...), their steps interleaved with the default
    group's in this process (the order rotating every step, so that no
    variant always goes first), so that a setting's effect is measured
    without the 30% between processes (trap 66); b_over_a is the median
    of each variant step's time over the default group's step of the same
    round. Under NVIDIA's NCCL, Ferry's knobs change nothing: that run is
    the control (the interleaving's own noise)."""
    from torch.distributed import pipelining as pp

    case = case or f"pipe.{name}"
    if getattr(pp, "Schedule" + name, None) is None:
        rep.emit(case, None, skip=f"torch {torch.__version__} has no Schedule{name}")
        return
    runs = [PipeRun(pp, name, rank, world, device, seed, case)]

    def variant_run(group, label, words):
        # Inside the variant's words: its checked steps may make its
        # communicators (a group's first p2p call).
        runs.append(PipeRun(pp, name, rank, world, device, seed, label, group=group))
        for step in range(CHECK_STEPS):
            runs[-1].step(rank, seed, step, device)

    with CommClock() as clock:
        # Checked steps first, each run's on its own.
        for step in range(CHECK_STEPS):
            runs[0].step(rank, seed, step, device)
        groups = VariantGroups(case, world, variant_run)
        clock.take()
        pinned = pin_main_thread()
        cpu0 = thread_cpu()
        for k, step in enumerate(range(CHECK_STEPS, CHECK_STEPS + TIME_STEPS)):
            for run in (runs[i] for i in groups.order(k)):
                run.step(rank, seed, step, device)
                ms, calls = clock.take()
                run.comm_times.append(ms)
                run.comm_calls.append(calls)
        threads = busy_threads(cpu0, thread_cpu())
    if os.environ.get("CLIENT_PROFILE_STEP") == "1":
        # Every group's step, so that CLIENT_AB_ENV's variants come with
        # traces of the same process to compare (trace_gaps.py).
        for run in runs:
            profile_step(lambda run=run: run.step(rank, seed, CHECK_STEPS, device, timed=False),
                         f"{rep.tag}-{run.label}", rank)
    step_times = [run.step_times for run in runs]
    for k, run in enumerate(runs):
        fields = run.fields(device)
        fields["threads"] = threads
        if pinned:
            fields["pin_main"] = pinned
        fields.update(groups.ab_fields(k, step_times, lambda v: sync_max(v, device)))
        if run.last:
            fields["max_rel_err"] = run.worst
        rep.emit(run.label, run.worst < 2e-2, **fields)
    torch.cuda.synchronize()
    groups.destroy()


def profile_step(step, name: str, rank: int):
    """CLIENT_PROFILE_STEP=1: one more step, after the timed ones, under
    torch.profiler; prints the CPU ops and GPU work that took the most time
    (where a CPU-paced step spends it: library calls, syncs, allocations),
    and with CLIENT_TRACE_DIR set writes the step's Chrome trace there."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    for key in ("self_cpu_time_total", "self_device_time_total"):
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60)
        except (AttributeError, KeyError, RuntimeError) as e:  # older names: cuda_time
            table = f"(no {key}: {e})"
        print(f"PROFILE {name} rank {rank} by {key}\n{table}", flush=True)
    where = os.environ.get("CLIENT_TRACE_DIR")
    if where:
        os.makedirs(where, exist_ok=True)
        prof.export_chrome_trace(os.path.join(where, f"trace-{name}-rank{rank}.json"))
