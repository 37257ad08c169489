"""What every case of the real-client suite shares: the one-line RESULT
records, cross-rank maxima, reproducible data and error measures."""
import ctypes
import json

import torch
import torch.distributed as dist

H = 4096            # hidden size (pipelining stages, FSDP2 layers)
TIME_STEPS = 15     # timed steps of a case (median or mean step time)


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


def seeded(seed: int, *shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Reproducible on every rank (same seed, same generator kind), drawn
    where it is used: CPU generation of 100M-element batches would dominate
    the step times."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device).to(dtype=dtype)

def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.float(), target.float())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()
