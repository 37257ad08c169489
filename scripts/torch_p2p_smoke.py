"""PyTorch point-to-point through Ferry's libnccl.so.2 (device machine only).

Run, from the repository root, with two GPUs:
  LD_PRELOAD=$PWD/build/libnccl.so.2 torchrun --nproc-per-node 2 scripts/torch_p2p_smoke.py
(or through scripts/device_p2p.sh's `torch` stage). Each check uses fresh
random data and compares element-wise with what the peer must have sent.
Collectives are not implemented in Ferry yet, so none is called here.
"""
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    seed = int(os.environ.get("FERRY_TEST_SEED", "12345"))
    failures = 0
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world

    def payload(src: int, round_: int, n: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 1000 + src * 100 + round_)
        return torch.randn(n, generator=g).cuda()

    for round_, n in enumerate([1, 1000, 1 << 20, (1 << 24) + 3]):
        out = payload(rank, round_, n)
        inp = torch.full((n,), float("nan"), device="cuda")
        ops = [dist.P2POp(dist.isend, out, peer_next), dist.P2POp(dist.irecv, inp, peer_prev)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        torch.cuda.synchronize()
        if not torch.equal(inp, payload(peer_prev, round_, n)):
            print(f"rank {rank}: batch_isend_irecv of {n} floats WRONG", flush=True)
            failures += 1
    # Blocking send/recv in pipeline order (even ranks send first).
    n = 4 << 20
    out, inp = payload(rank, 9, n), torch.empty(n, device="cuda")
    if rank % 2 == 0:
        dist.send(out, peer_next)
        dist.recv(inp, peer_prev)
    else:
        dist.recv(inp, peer_prev)
        dist.send(out, peer_next)
    torch.cuda.synchronize()
    if not torch.equal(inp, payload(peer_prev, 9, n)):
        print(f"rank {rank}: send/recv WRONG", flush=True)
        failures += 1
    print(f"{'PASS' if failures == 0 else 'FAIL'} rank {rank}: torch p2p through Ferry", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
