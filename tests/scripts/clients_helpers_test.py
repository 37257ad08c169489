"""Checks what of the real-client suite device runs rely on but needs no
GPU: procutil.py's EnvWords (the within-process A/B of CLIENT_AB_ENV: a
setting must reach the second group's communicators and nothing after),
thread_cpu/busy_threads (which threads burn a step's CPU) and
pin_main_thread's off switch; pipe_case.py's pipe case with CLIENT_AB_ENV
and common.py's VariantGroups (the a2a case's), their control flow only,
over a stub torch package (stages
and a schedule that log what they are asked). Exits non-zero after
listing every mismatch."""
import os
import random
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
stub = tempfile.mkdtemp(prefix="fake-torch-")
os.makedirs(os.path.join(stub, "torch", "distributed"))
with open(os.path.join(stub, "torch", "__init__.py"), "w") as f:
    f.write("def __getattr__(name):\n    return object()\n")
with open(os.path.join(stub, "torch", "nn.py"), "w") as f:
    f.write("class Module:\n    pass\ndef __getattr__(name):\n    return object\n")
with open(os.path.join(stub, "torch", "distributed", "__init__.py"), "w") as f:
    f.write("def __getattr__(name):\n    return object()\n")
with open(os.path.join(stub, "torch", "distributed", "distributed_c10d.py"), "w") as f:
    f.write("def __getattr__(name):\n    return object()\n")
# torch.distributed.pipelining: stages and a schedule that log what they do
# (which group, which step, the environment a group was made in).
with open(os.path.join(stub, "torch", "distributed", "pipelining.py"), "w") as f:
    f.write("""
log = []
class PipelineStage:
    def __init__(self, mod, index, nstages, device, group=None):
        self.submod, self.group = mod, group
class ScheduleGPipe:
    def __init__(self, stage, n_microbatches, loss_fn, scale_grads):
        self.stage = stage
    def step(self, *args, **kwargs):
        log.append(("step", self.stage.group))
""")
sys.path[:0] = [stub, os.path.join(here, "..", "..", "scripts", "real_clients")]
import clients  # noqa: E402,F401  (the suite's entry imports cleanly)
import common  # noqa: E402
import pipe_case  # noqa: E402
import procutil  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


# EnvWords: set inside, restored after (an unset variable unset again, a
# set one back to its value), words without '=' ignored.
tag = "%08x" % random.getrandbits(32)
unset_var, set_var = f"FERRY_TEST_UNSET_{tag}", f"FERRY_TEST_SET_{tag}"
os.environ[set_var] = "before"
with procutil.EnvWords(f"{unset_var}=1 {set_var}=after junk"):
    check(os.environ.get(unset_var) == "1", "EnvWords sets an unset variable")
    check(os.environ.get(set_var) == "after", "EnvWords overrides a set variable")
    check("junk" not in os.environ, "EnvWords ignores a word without '='")
check(unset_var not in os.environ, "EnvWords unsets what was unset")
check(os.environ.get(set_var) == "before", "EnvWords restores a previous value")
# Values may contain '=' (FERRY_TEST_RANK_ENV-like words).
with procutil.EnvWords(f"{unset_var}=a=b"):
    check(os.environ.get(unset_var) == "a=b", "EnvWords keeps '=' inside a value")
check(unset_var not in os.environ, "EnvWords unsets it again")

# busy_threads: a thread that spins between two snapshots is listed with
# its CPU; the main thread comes first even when it used less.
stop = threading.Event()


def spin():
    while not stop.is_set():
        pass


spinner = threading.Thread(target=spin, name="spinner")
before = procutil.thread_cpu()
spinner.start()
time.sleep(0.3)
after = procutil.thread_cpu()
stop.set()
spinner.join()
line = procutil.busy_threads(before, after)
words = line.split()
check(words and words[0].startswith("main:"), f"main thread first: {line!r}")
# (The OS name of a Python thread is the process's unless set: any other
# thread with the spinner's CPU counts.)
spun = [int(w.rsplit(":", 1)[1]) for w in words[1:]]
check(spun and max(spun) >= 50, f"the spinning thread is listed with >= 50 ms: {line!r}")

# pin_main_thread: off unless CLIENT_PIN_MAIN=1, and then it changes nothing.
os.environ.pop("CLIENT_PIN_MAIN", None)
mask = os.sched_getaffinity(0)
check(procutil.pin_main_thread() == "", "pin_main_thread is off by default")
check(os.sched_getaffinity(0) == mask, "pin_main_thread off leaves the affinity alone")

# case_pipe with CLIENT_AB_ENV: group B is made inside the words (and the
# environment restored after), the checked steps run per group, the timed
# steps alternate A, B, A, B, and both cases are reported, B with its
# b_over_a and the words.
from types import SimpleNamespace  # noqa: E402
import torch.distributed.pipelining as pp  # noqa: E402


class FakeModule:
    def to(self, *args, **kwargs):
        return self

    def parameters(self):
        return []


groups = []


def new_group(ranks):
    groups.append((tuple(ranks), os.environ.get(unset_var)))
    return f"group{len(groups)}"


emitted = []
pipe_case.torch.cuda = SimpleNamespace(synchronize=lambda: None)
pipe_case.torch.optim = SimpleNamespace(SGD=lambda params, lr: SimpleNamespace(
    zero_grad=lambda set_to_none=True: None, step=lambda: None))
pipe_case.dist.barrier = lambda: None
pipe_case.dist.new_group = new_group
destroyed = []
pipe_case.dist.destroy_process_group = destroyed.append
pipe_case.stage_module = lambda index, seed: FakeModule()
pipe_case.pipe_batch = lambda seed, step, device: (None, None)
pipe_case.sync_max = common.sync_max = lambda value, device: value  # no process group
pipe_case.check_pipe_step = lambda *args: 0.0
pipe_case.nn.Sequential = lambda *mods: FakeModule()
rep = SimpleNamespace(tag="t", emit=lambda case, ok, **f: emitted.append((case, ok, f)))
os.environ["CLIENT_AB_ENV"] = f"{unset_var}=on; {unset_var}=two ;"
check([v for v, _ in common.ab_variants()] == ["B", "C"], "two variants, the empty one dropped")
pipe_case.case_pipe(rep, "GPipe", 0, 2, "cpu", 1)
del os.environ["CLIENT_AB_ENV"]
check(groups == [((0, 1), "on"), ((0, 1), "two")],
      f"one group per variant, each made inside its words: {groups}")
check(unset_var not in os.environ, "the words are gone after the case")
order = [g for _, g in pp.log]
n_check, n_time = pipe_case.CHECK_STEPS, pipe_case.TIME_STEPS
rounds = [[None, "group1", "group2"][k % 3:] + [None, "group1", "group2"][:k % 3]
          for k in range(n_time)]
want = ([None] * n_check + ["group1"] * n_check + ["group2"] * n_check +
        [g for r in rounds for g in r])
check(order == want, f"steps: checked per group, then interleaved, rotating: {order}")
check([e[0] for e in emitted] == ["pipe.GPipe", "pipe.GPipe+B", "pipe.GPipe+C"],
      f"cases reported: {emitted}")
check(emitted and all(e[1] for e in emitted), "every case ok")
for e, words in zip(emitted[1:], [f"{unset_var}=on", f"{unset_var}=two"]):
    check(e[2].get("ab_env") == words and e[2].get("b_over_a", 0) > 0,
          f"{e[0]} carries its words and b_over_a: {e[2]}")
check("b_over_a" not in emitted[0][2], "the default group has no ratio")
check(all(e[2].get("comm_calls") == 0 for e in emitted), "comm_calls counted per case")
check(destroyed == ["group1", "group2"], f"the variants' groups destroyed at the end: {destroyed}")

# CLIENT_PROFILE_STEP=1 with variants: one profiled step per group, each
# named by its case, after the timed steps.
profiled = []
pipe_case.profile_step = lambda step, name, rank: (profiled.append(name), step())
os.environ["CLIENT_AB_ENV"] = f"{unset_var}=on"
os.environ["CLIENT_PROFILE_STEP"] = "1"
pp.log.clear()
emitted.clear()
pipe_case.case_pipe(rep, "GPipe", 0, 2, "cpu", 1)
del os.environ["CLIENT_AB_ENV"], os.environ["CLIENT_PROFILE_STEP"]
check(profiled == ["t-pipe.GPipe", "t-pipe.GPipe+B"], f"one profiled step per group: {profiled}")
check([g for _, g in pp.log][-2:] == [None, "group3"],
      f"the profiled steps ran on their own groups, last: {pp.log[-2:]}")

# VariantGroups (the a2a case's CLIENT_AB_ENV): one group per variant, made
# and warmed inside its words; labels; rotating order; b_over_a as the
# median of per-iteration ratios through `agree`; the groups destroyed.
groups.clear()
destroyed.clear()
warmed = []
os.environ["CLIENT_AB_ENV"] = f"{unset_var}=x;{unset_var}=y"
vg = common.VariantGroups("a2a", 2, lambda g, label, words: warmed.append(
    (g, os.environ.get(unset_var), label, words)))
del os.environ["CLIENT_AB_ENV"]
check(vg.labels == ["a2a", "a2a+B", "a2a+C"], f"labels {vg.labels}")
check(groups == [((0, 1), "x"), ((0, 1), "y")], f"groups made inside their words: {groups}")
check(warmed == [(vg.groups[1], "x", "a2a+B", f"{unset_var}=x"), (vg.groups[2], "y", "a2a+C", f"{unset_var}=y")],
      f"each warmed inside its words, told its label and words: {warmed}")
check(unset_var not in os.environ, "the words are gone after the groups are made")
check([vg.order(i) for i in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]],
      f"rotating order: {[vg.order(i) for i in range(4)]}")
base = [random.uniform(1, 2) for _ in range(5)]
scaled = [b * f for b, f in zip(base, [0.9, 0.95, 0.91, 1.2, 0.93])]
got = vg.ab_fields(2, [base, base, scaled], lambda v: v * 10)
check(got == {"b_over_a": round(0.93 * 10, 4), "ab_env": f"{unset_var}=y"} and vg.ab_fields(0, [base], None) == {},
      f"ab_fields: {got}")
vg.destroy()
check(destroyed == vg.groups[1:], f"variant groups destroyed: {destroyed}")
os.environ.pop("CLIENT_AB_ENV", None)
none = common.VariantGroups("a2a", 2, lambda *args: warmed.append(args))
check(none.labels == ["a2a"] and none.groups == [None] and none.order(5) == [0],
      "without CLIENT_AB_ENV: the default group alone")

# split_train (the overlap case's reading of its matmul train), against an
# independent count over random trains and spans.
for trial in range(50):
    durs = [random.uniform(0.5, 1.5) for _ in range(120)]
    at = [0.0]
    for d in durs:
        at.append(at[-1] + d)
    lo = random.uniform(at[15], at[80])
    hi = lo + random.uniform(3, 20)
    inside = [d for k, d in enumerate(durs) if k >= 10 and at[k] >= lo and at[k] + d <= hi]
    outside = [d for k, d in enumerate(durs) if k >= 10 and (at[k] + d <= lo or at[k] >= hi)]
    got = common.split_train(at, 10, lo, hi)
    want = (sum(inside) / len(inside), sum(outside) / len(outside))
    if abs(got[0] - want[0]) > 1e-9 or abs(got[1] - want[1]) > 1e-9:
        check(False, f"split_train trial {trial}: {got} != {want}")
        break
# [0,1) warm, [1,4) [4,7) [7,10): a span inside one matmul counts that one.
check(common.split_train([0, 1, 4, 7, 10], 1, 4.5, 5.0) == (3.0, 3.0),
      f"split_train, span shorter than a matmul: {common.split_train([0, 1, 4, 7, 10], 1, 4.5, 5.0)}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("clients helpers: all checks passed")
