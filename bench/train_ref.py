# train_ref.py: the reference for bench/train_bench.lua: the same models, batch
# sizes, optimizer and thread count in PyTorch's CPU eager mode. Prints one
# line per case: "<case> <ms per step>". Used only when torch is installed.
import sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1])
torch.set_num_threads(threads)
torch.manual_seed(0)

def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))

def bench(name, model, shape, steps):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))
    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    for _ in range(max(5, steps // 10)):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t0
    print(f"{name} {dt / steps * 1e3:.4f}", flush=True)

for arg in sys.argv[2:]:
    kind, batch, steps = arg.split(":")
    batch, steps = int(batch), int(steps)
    if kind == "mlp":
        bench(arg, mlp(), (batch, 784), steps)
    else:
        bench(arg, cnn(), (batch, 1, 28, 28), steps)
