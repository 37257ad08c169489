"""Process-level helpers of the real-client suite that need no torch (so
that CI checks them, tests/scripts/clients_helpers_test.py): CPU pinning
by GPU locality, the per-thread CPU report, the main-thread pinning
experiment, and EnvWords (settings in the environment for a block, for
CLIENT_AB_ENV's second group)."""
import os
import subprocess
import threading


class EnvWords:
    """Sets VAR=value words in this process's environment for a block and
    restores them after: a library reads its settings when it creates a
    communicator (Ferry: every init and split), so a group made inside the
    block runs with them and the default group without."""

    def __init__(self, words: str):
        self.words = dict(w.split("=", 1) for w in words.split() if "=" in w)
        self.saved = {}

    def __enter__(self):
        for k, v in self.words.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def parse_cpulist(text: str) -> set:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def physical_gpu(local: int) -> int:
    """The nvidia-smi index (PCI order) of this rank's GPU: CUDA_VISIBLE_DEVICES
    names it when set (the paired runs give each job two GPUs of four)."""
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.strip().isdigit() for v in visible) and local < len(visible):
        return int(visible[local])
    return local


def gpu_cpulists() -> list:
    """Each GPU's NUMA-local CPU set, by nvidia-smi index."""
    lines = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20).stdout.split()
    out = []
    for bus in lines:  # nvidia-smi: 00000000:19:00.0; sysfs: 0000:19:00.0
        with open(f"/sys/bus/pci/devices/{bus.strip()[-12:].lower()}/local_cpulist") as f:
            out.append(parse_cpulist(f.read()))
    return out


def thread_cpu() -> dict:
    """{tid: (name, CPU seconds)} of every thread of this process, from
    /proc (utime + stime): which threads burn the CPU of a CPU-paced step
    (the main thread, a library's proxy or watchdog threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def busy_threads(before: dict, after: dict, top: int = 5) -> str:
    """The threads that used the most CPU between two thread_cpu() calls,
    as 'name:ms' (the main thread first), for a case's RESULT."""
    main = threading.get_native_id()
    used = [(after[t][1] - before.get(t, (None, 0.0))[1], t, after[t][0]) for t in after]
    used.sort(key=lambda u: (u[1] != main, -u[0]))
    return " ".join(f"{'main' if t == main else name}:{ms * 1000:.0f}" for ms, t, name in used[:top]
                    if ms > 0 or t == main)


def siblings_of(cpu: int) -> set:
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            return parse_cpulist(f.read())
    except OSError:
        return {cpu}


def pin_main_thread() -> str:
    """CLIENT_PIN_MAIN=1: the main (Python) thread alone on the first CPU of
    the rank's slice, every other thread of the process on the rest of the
    slice minus that CPU's hyperthread siblings. Called once the libraries'
    threads exist (after the checked steps): a thread started later would
    inherit the main thread's single CPU. Tells whether where the scheduler
    puts the main thread beside the others is what makes one process's
    steps 30% slower than another's (trap 66)."""
    if os.environ.get("CLIENT_PIN_MAIN") != "1":
        return ""
    main = threading.get_native_id()
    mine = os.sched_getaffinity(0)
    if len(mine) == 1:
        return f"main on {min(mine)}"  # pinned already (an earlier case)
    cpu = min(mine)
    others = (mine - siblings_of(cpu)) or (mine - {cpu})
    if not others:
        return "one cpu"
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != main:
            try:
                os.sched_setaffinity(int(tid), others)
            except OSError:
                pass
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread on Linux
    return f"main on {cpu}, others on {len(others)}"


def pin_near_gpu(local: int) -> str:
    """Binds this process (and the threads it starts later: the libraries'
    proxy and watchdog threads) to its share of the CPUs of its GPU's NUMA
    node, so step times do not depend on where the scheduler put each rank
    (the same for both libraries). The GPUs whose node it is share its CPUs
    in slices by GPU index, so one rank's threads never take another's
    cores, even those of another job running at the same time on other GPUs
    (the paired stage of real_clients.sh). CLIENT_PIN=0 leaves the affinity
    alone. Returns what was done, for the library record."""
    if os.environ.get("CLIENT_PIN", "1") == "0":
        return "off"
    try:
        lists = gpu_cpulists()
        gpu = physical_gpu(local)
        node = lists[gpu]
        cpus = sorted(node & os.sched_getaffinity(0))
        sharing = [g for g, l in enumerate(lists) if l == node]
        parts = len(sharing)
        if len(cpus) >= 2 * parts:
            k = sharing.index(gpu)
            cpus = cpus[k * len(cpus) // parts:(k + 1) * len(cpus) // parts]
        if not cpus:
            return "no cpus"
        os.sched_setaffinity(0, set(cpus))
        return f"{cpus[0]}-{cpus[-1]} ({len(cpus)}), GPU {gpu}"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
        return f"failed: {e}"[:80]
