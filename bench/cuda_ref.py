# cuda_ref.py: the PyTorch reference of bench/cuda_bench.lua, on the same GPU,
# timed as the Lua side times Tide (wall clock, torch.cuda.synchronize() at the
# end of each round, median of the rounds):
#   seed                  ten rounds of x = randn(n, n); x @ x: "seed <enqueue ms> <synchronised ms>"
#   small                 x + 1 and x.add_(1) on 1000 float32s, n times each: "small <enqueue us>
#                         <synchronised us> <enqueue us> <synchronised us>" per op
#   mm:<case>             an n x n matmul, float32 (TF32 off), tf32, bfloat16, float16:
#                         "mm:<case> <TFLOP/s>"
#   <kind>:<batch>:<steps>:eager|compiled
#                         a training step (forward, backward, Adam) eager or
#                         torch.compile'd: "<case> <ms per step>"
# A case that fails prints "<case> unavailable <reason>"; no usable GPU prints
# "unavailable <reason>". Float32 keeps TF32 off (matmuls and cuDNN) and half
# matmuls keep float32 split-K sums, as Tide's defaults do, except in mm:tf32.
# --device cpu runs it all on the CPU: a check of this script, not a reference.
# usage: python3 bench/cuda_ref.py --device 0 --train mlp:16:200 mlp:128:200 cnn:64:50
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="0", help="a CUDA device index, or cpu")
ap.add_argument("--seed-n", type=int, default=1000)
ap.add_argument("--seed-repeats", type=int, default=5)
ap.add_argument("--small-n", type=int, default=20000)
ap.add_argument("--mm-n", type=int, default=4096)
ap.add_argument("--mm-reps", type=int, default=50)
ap.add_argument("--mm-rounds", type=int, default=10)
ap.add_argument("--mm", nargs="*", default=["float32", "tf32", "bfloat16", "float16"])
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--train", nargs="*", default=[])
ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
ap.add_argument("--compile-mode", default=None, help="torch.compile's mode (default: its default)")
args = ap.parse_args()


def say(line):
    print(line, flush=True)


def reason(e):
    lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


if args.device == "cpu":
    dev = torch.device("cpu")
    sync = lambda: None
    say(f"gpu none (a CPU check of cuda_ref.py, {torch.get_num_threads()} threads)")
else:
    if not torch.cuda.is_available():
        say(f"unavailable torch {torch.__version__} sees no CUDA device (built with CUDA {torch.version.cuda})")
        sys.exit(0)
    idx = int(args.device)
    if idx >= torch.cuda.device_count():
        say(f"unavailable no CUDA device {idx} ({torch.cuda.device_count()} found)")
        sys.exit(0)
    dev = torch.device("cuda", idx)
    torch.cuda.set_device(dev)
    sync = torch.cuda.synchronize
    say(f"gpu {torch.cuda.get_device_name(dev)}")
say(f"versions torch-{torch.__version__} CUDA-{torch.version.cuda}")

torch.backends.cudnn.allow_tf32 = False
for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
    try:
        setattr(torch.backends.cuda.matmul, flag, False)
    except AttributeError:  # an older torch: its half matmuls keep float32 sums anyway
        pass


def tf32(on):
    torch.set_float32_matmul_precision("high" if on else "highest")


def median(ts):
    return sorted(ts)[len(ts) // 2]


def case(name, f):
    try:
        f()
    except Exception as e:  # one case's failure is reported, the others still run
        say(f"{name} unavailable {reason(e)}")


# -- seed: ten rounds of randn and matmul --------------------------------------------------
def seed():
    tf32(False)
    n = args.seed_n

    def rounds():
        for _ in range(10):
            x = torch.randn(n, n, device=dev)
            y = x @ x
        return y

    rounds()
    sync()
    enq, total = [], []
    for _ in range(args.seed_repeats):
        t0 = time.perf_counter()
        rounds()
        enq.append(time.perf_counter() - t0)
        sync()
        total.append(time.perf_counter() - t0)
    say(f"seed {median(enq) * 1e3:.4f} {median(total) * 1e3:.4f}")


case("seed", seed)


# -- small ops: the cost of one launch ------------------------------------------------------
def small():
    x = torch.randn(1000, device=dev)
    n = args.small_n
    figures = []
    for f in (lambda: x + 1, lambda: x.add_(1)):
        for _ in range(200):
            f()
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        figures += [(t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6]
    say("small " + " ".join(f"{v:.3f}" for v in figures))


case("small", small)


# -- matmul TFLOP/s ------------------------------------------------------------------------
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def mm(name):
    tf32(name == "tf32")
    n = args.mm_n
    a = torch.randn(n, n, device=dev).to(DTYPES[name])
    b = torch.randn(n, n, device=dev).to(DTYPES[name])
    for _ in range(3):
        a @ b
    sync()
    ts = []
    for _ in range(args.mm_rounds):
        t0 = time.perf_counter()
        for _ in range(args.mm_reps):
            a @ b
        sync()
        ts.append((time.perf_counter() - t0) / args.mm_reps)
    say(f"mm:{name} {2 * n ** 3 / median(ts) * 1e-12:.3f}")


for name in args.mm:
    case("mm:" + name, lambda: mm(name))
tf32(False)


# -- training steps --------------------------------------------------------------------------
def model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def train(spec, how):
    kind, batch, steps = spec.split(":")
    batch, steps = int(batch), int(steps)
    torch.manual_seed(0)
    if how == "compiled":
        torch._dynamo.reset()  # each case compiles afresh
    m = model(kind).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(batch, 784, device=dev) if kind == "mlp" else torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step(xb, yb):
        loss = F.cross_entropy(m(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    f = torch.compile(step, mode=args.compile_mode) if how == "compiled" else step
    for _ in range(max(5, steps // 10)):  # warm-up (and compilation)
        loss = f(x, y)
    loss.item()
    ts = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = f(x, y)
        sync()
        ts.append((time.perf_counter() - t0) / steps)
    if loss.item() != loss.item():
        raise RuntimeError("the loss is NaN")
    say(f"{spec}:{how} {median(ts) * 1e3:.4f}")


for spec in args.train:
    case(spec + ":eager", lambda: train(spec, "eager"))
    if args.no_compile:
        say(f"{spec}:compiled unavailable left out (--no-compile)")
    else:
        case(spec + ":compiled", lambda: train(spec, "compiled"))
