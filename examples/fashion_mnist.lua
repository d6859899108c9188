-- fashion_mnist.lua: trains a classifier of Fashion-MNIST, Debian's
-- dataset-fashion-mnist (the README's set-up installs it), with a progress bar
-- per epoch, evaluates on the 10,000 test images, saves a checkpoint and
-- prints a summary. `make demo` runs it with its defaults.
--
--   build/tide examples/fashion_mnist.lua [--epochs 3] [--batch-size 64]
--     [--model cnn|mlp] [--lr 0.001] [--device cpu] [--limit N] [--seed 0]
--     [--data DIR] [--out fashion_mnist.safetensors] [--threads N] [--compile 0|1]
local tide = require "tide"
local nn, F, optim = tide.nn, tide.nn.functional, tide.optim

-- -- options ------------------------------------------------------------------------------

local defaults = {
  epochs = 3, ["batch-size"] = 64, model = "cnn", lr = 1e-3, device = "cpu", limit = 0, seed = 0,
  data = "/usr/share/datasets/fashion-mnist", out = "fashion_mnist.safetensors", threads = 0, compile = 0,
}
local function usage(msg)
  io.stderr:write((msg and ("fashion_mnist: " .. msg .. "\n") or "") ..
    "usage: tide examples/fashion_mnist.lua [--epochs N] [--batch-size N] [--model cnn|mlp] [--lr X]\n" ..
    "         [--device cpu|cpu:N|cuda:N] [--limit N (training images; 0: all)] [--seed N] [--data DIR]\n" ..
    "         [--out FILE] [--threads N] [--compile 0|1 (tide.jit.compile the training step)]\n")
  os.exit(msg and 2 or 0)
end
local opt = {}
for k, v in pairs(defaults) do opt[k] = v end
local i = 1
while i <= #arg do
  local a = arg[i]
  if a == "-h" or a == "--help" then usage() end
  local k = a:match("^%-%-([%w-]+)$")
  if not k or defaults[k] == nil then usage("unknown option " .. a) end
  local v = arg[i + 1]
  if v == nil then usage("option " .. a .. " needs a value") end
  if type(defaults[k]) == "number" then
    v = tonumber(v)
    if not v then usage("option " .. a .. " needs a number") end
  end
  opt[k] = v
  i = i + 2
end
if opt.model ~= "cnn" and opt.model ~= "mlp" then usage("--model must be cnn or mlp") end
if opt.threads > 0 then tide.set_num_threads(opt.threads) end
tide.manual_seed(opt.seed)

-- -- data -------------------------------------------------------------------------------------

local function load(kind)
  local prefix = kind == "train" and "train" or "t10k"
  local function file(what)
    local p = string.format("%s/%s-%s-idx%d-ubyte.gz", opt.data, prefix, what, what == "images" and 3 or 1)
    local f = io.open(p, "rb")
    if not f then
      io.stderr:write("fashion_mnist: cannot open " .. p ..
        "\n  (install Debian's dataset-fashion-mnist, or pass --data DIR)\n")
      os.exit(1)
    end
    f:close()
    return tide.io.read_idx(p)
  end
  -- images as float32 in [0, 1], normalised with the training set's mean and std
  local x = (file("images"):float() / 255 - 0.2860) / 0.3530
  local y = file("labels"):long() + 1      -- classes 1..10, as every index in Tide
  return x:view(x:size(1), 1, 28, 28), y
end
local train_x, train_y = load("train")
local test_x, test_y = load("test")
if opt.limit > 0 and opt.limit < train_x:size(1) then
  train_x, train_y = train_x:narrow(1, 1, opt.limit), train_y:narrow(1, 1, opt.limit)
  test_x, test_y = test_x:narrow(1, 1, math.max(1000, math.floor(opt.limit / 6))),
    test_y:narrow(1, 1, math.max(1000, math.floor(opt.limit / 6)))
end
local classes = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
  "Ankle boot" }

-- -- model --------------------------------------------------------------------------------------

local model
if opt.model == "cnn" then
  model = nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),     -- 32 x 14 x 14
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),    -- 64 x 7 x 7
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
else
  model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
    nn.Linear(256, 10))
end
model:to(opt.device)
local n_params = 0
for _, p in ipairs(model:parameters()) do n_params = n_params + p:numel() end
local opt_ = optim.Adam(model:parameters(), { lr = opt.lr })
local steps_per_epoch = math.ceil(train_x:size(1) / opt["batch-size"])
local sched = optim.lr_scheduler.CosineAnnealingLR(opt_, { T_max = opt.epochs * steps_per_epoch })

print(string.format("Fashion-MNIST: %d training and %d test images; model %s (%d parameters) on %s, %d threads",
  train_x:size(1), test_x:size(1), opt.model, n_params, opt.device, tide.get_num_threads()))

-- -- progress bar -------------------------------------------------------------------------------

local ffi = require "ffi"
ffi.cdef [[
  struct tide_ex_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct tide_ex_timespec * ts);
  int isatty(int fd);
]]
local ts = ffi.new("struct tide_ex_timespec")
local function now() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9 end
local tty = ffi.C.isatty(1) == 1
local last_quarter = 0   -- without a terminal: a line per quarter of an epoch
local function clock(s)
  s = math.max(0, math.floor(s + 0.5))
  return string.format("%d:%02d", math.floor(s / 60), s % 60)
end
local function bar(epoch, done, total, loss, acc, rate, eta, final)
  local width = 24
  local fill = math.floor(width * done / total)
  local line = string.format("epoch %d/%d [%s%s] %d/%d loss %.4f acc %5.1f%% %6.0f samples/s %s %s", epoch,
    opt.epochs, string.rep("=", fill), string.rep(" ", width - fill), done, total, loss, acc * 100, rate,
    final and "took" or "ETA", clock(eta))
  local quarter = math.floor(4 * done / total)
  if tty then
    io.write("\r", line, final and "\n" or "")
  elseif quarter > last_quarter or final then
    io.write(line, "\n")
  end
  last_quarter = final and 0 or quarter
  io.flush()
end

-- -- training -----------------------------------------------------------------------------------

local loader = tide.data.DataLoader(tide.data.TensorDataset(train_x, train_y),
  { batch_size = opt["batch-size"], shuffle = true, seed = opt.seed })

local function evaluate()
  model:eval()
  local correct, total = 0, test_x:size(1)
  tide.no_grad(function()
    for start = 1, total, 500 do
      local n = math.min(500, total - start + 1)
      local logits = model(test_x:narrow(1, start, n):to(opt.device))
      correct = correct + logits:argmax(2):eq(test_y:narrow(1, start, n):to(opt.device)):sum():item()
    end
  end)
  model:train()
  return correct / total
end

-- One training step; with --compile 1 it is captured into a graph and replayed.
local function train_step(xb, yb)
  local logits = model(xb)
  local loss = F.cross_entropy(logits, yb)
  opt_:zero_grad()
  loss:backward()
  opt_:step()
  return loss, logits
end
if opt.compile ~= 0 then train_step = tide.jit.compile(train_step) end

local t_start = now()
local history = {}
for epoch = 1, opt.epochs do
  local t0, seen, loss_sum, correct = now(), 0, 0, 0
  local loss_avg, acc_avg = 0, 0
  local b = 0
  for xb, yb in loader:iter() do
    xb, yb = xb:to(opt.device), yb:to(opt.device)
    local loss, logits = train_step(xb, yb)
    sched:step()
    b = b + 1
    local n = xb:size(1)
    seen = seen + n
    -- reading the loss waits for the step; do it a few times per epoch only
    if b % 20 == 0 or b == #loader then
      loss_sum = loss:item()
      correct = logits:argmax(2):eq(yb):sum():item() / n
      loss_avg = loss_avg == 0 and loss_sum or 0.9 * loss_avg + 0.1 * loss_sum
      acc_avg = acc_avg == 0 and correct or 0.9 * acc_avg + 0.1 * correct
      local dt = now() - t0
      local rate = seen / dt
      local final = b == #loader
      bar(epoch, b, #loader, loss_avg, acc_avg, rate, final and dt or (train_x:size(1) - seen) / rate, final)
    end
  end
  local acc = evaluate()
  history[epoch] = { loss = loss_avg, test_acc = acc, seconds = now() - t0 }
  print(string.format("epoch %d: test accuracy %.2f%% (%.1f s, %.0f samples/s)", epoch, acc * 100, now() - t0,
    train_x:size(1) / (now() - t0)))
end

-- -- checkpoint and summary ---------------------------------------------------------------------

tide.save(opt.out, { model = model:state_dict(), optimizer = opt_:state_dict(), epochs = opt.epochs })
local check = tide.load(opt.out)
local restored = opt.model == "cnn" and model or model   -- same architecture: load into the live model
restored:load_state_dict(check.model)
local final_acc = evaluate()

-- per-class accuracy on the test set
local per_class = {}
tide.no_grad(function()
  model:eval()
  local pred = model(test_x:to(opt.device)):argmax(2):to("cpu")
  local hits = pred:eq(test_y):double()
  for c = 1, 10 do
    local mask = test_y:eq(c)
    local n = mask:sum():item()
    per_class[c] = n > 0 and (hits * mask:double()):sum():item() / n or 0
  end
end)

print(string.format("\nsummary: %d epochs in %s, final test accuracy %.2f%%, checkpoint %s", opt.epochs,
  clock(now() - t_start), final_acc * 100, opt.out))
for c = 1, 10 do print(string.format("  %-12s %5.1f%%", classes[c], per_class[c] * 100)) end
