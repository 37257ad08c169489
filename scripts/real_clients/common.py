"""What every case of the real-client suite shares: the one-line RESULT
records, cross-rank maxima, reproducible data and error measures, and
CLIENT_AB_ENV's variant groups."""
import ctypes
import json
import os

import torch
import torch.distributed as dist

from procutil import EnvWords

H = 4096            # hidden size (pipelining stages, FSDP2 layers)
# Timed steps of a case (median or mean step time); CLIENT_TIME_STEPS sets
# more, e.g. to sample a steady state with perf.
TIME_STEPS = int(os.environ.get("CLIENT_TIME_STEPS", "15"))


def library_in_use() -> str:
    """Ferry exports ncclFerry* extensions; NVIDIA's NCCL does not."""
    try:
        getattr(ctypes.CDLL(None), "ncclFerryCommPeerStats")
        return "ferry"
    except AttributeError:
        return "nccl"


class Reporter:
    def __init__(self, rank: int, tag: str, lib: str):
        self.rank, self.tag, self.lib = rank, tag, lib

    def emit(self, case: str, ok, **fields):
        rec = {"case": case, "rank": self.rank, "tag": self.tag, "lib": self.lib, "ok": ok}
        rec.update(fields)
        print("RESULT " + json.dumps(rec), flush=True)


def sync_max(value: float, device) -> float:
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def upper_median(values) -> float:
    """The middle value (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def slowest_median(values, device, digits: int = 4) -> float:
    """This rank's median of `values`, then the largest over the ranks."""
    return round(sync_max(upper_median(values), device), digits)


def split_train(at, first, lo, hi):
    """A train of back-to-back matmuls, at[k] the start of matmul k and the
    end of matmul k-1: (mean of those wholly inside [lo, hi], mean of those
    from `first` on wholly outside it); those straddling an edge count for
    neither. When none lies wholly inside (traffic shorter than one matmul)
    those it touches count instead (as ferry-bench's gemm_split.h)."""
    spans = [(a, b) for a, b in zip(at[first:-1], at[first + 1:])]
    beside = [b - a for a, b in spans if a >= lo and b <= hi]
    if not beside:
        beside = [b - a for a, b in spans if b > lo and a < hi]
    alone = [b - a for a, b in spans if b <= lo or a >= hi]
    mean = lambda v: sum(v) / len(v) if v else float("nan")
    return mean(beside), mean(alone)


def seeded(seed: int, *shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Reproducible on every rank (same seed, same generator kind), drawn
    where it is used: CPU generation of 100M-element batches would dominate
    the step times."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device).to(dtype=dtype)


def ints(seed: int, n: int, device, lo: int = -64, hi: int = 64,
         dtype=torch.float32) -> torch.Tensor:
    """Integers in [lo, hi) as `dtype`, reproducible on every rank: the sums
    over any number of ranks the cases use are exact in any order of the
    adds, so outputs compare exactly."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(lo, hi, (n,), generator=g, device=device).to(dtype)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.float(), target.float())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


def ab_variants() -> list:
    """CLIENT_AB_ENV's variants: ';'-separated groups of VAR=value words,
    labelled B, C, D, ... (at most 8)."""
    groups = [g.strip() for g in os.environ.get("CLIENT_AB_ENV", "").split(";") if g.strip()]
    return [(chr(ord("B") + k), words) for k, words in enumerate(groups[:8])]


class VariantGroups:
    """A case's default group (None) and one more group of every rank per
    CLIENT_AB_ENV variant, made inside its words; `warm(group, label,
    words)` runs there too, so that a library creating its communicators
    at first use creates them with the words set. Labels: case, case+B, case+C, ... A case runs
    each iteration on every group in order(iteration) (rotating, so that
    no group always goes first) and reports ab_fields(k, times) with
    group k's result."""

    def __init__(self, case: str, world: int, warm):
        self.labels, self.words, self.groups = [case], [""], [None]
        for letter, words in ab_variants():
            with EnvWords(words):
                group = dist.new_group(list(range(world)))
                warm(group, f"{case}+{letter}", words)
            self.labels.append(f"{case}+{letter}")
            self.words.append(words)
            self.groups.append(group)

    def order(self, iteration: int) -> list:
        r = iteration % len(self.groups)
        ks = list(range(len(self.groups)))
        return ks[r:] + ks[:r]

    def ab_fields(self, k: int, times: list, agree) -> dict:
        """b_over_a (the median over iterations of group k's time over the
        default group's, made equal on every rank by `agree`) and the
        words; nothing for the default group."""
        if k == 0:
            return {}
        ratio = upper_median([b / a for a, b in zip(times[0], times[k]) if a > 0])
        return {"b_over_a": round(agree(ratio), 4), "ab_env": self.words[k]}

    def destroy(self):
        """Every rank calls it with the same groups."""
        for group in self.groups[1:]:
            dist.destroy_process_group(group)
