-- cuda_bench.lua: the GPU figures of the CUDA backend, each next to its reference
-- measured in the same run on the same GPU.
--   (1) ten rounds of "make a 1000x1000 random matrix and multiply it by itself":
--       enqueue alone, then with tide.sync(), next to the same loop in PyTorch
--       (torch.cuda.synchronize())
--   (2) matmul 4096x4096 in TFLOP/s: float32 (TF32 off), TF32
--       (tide.cuda.set_allow_tf32(true)), bfloat16 and float16, next to cuBLAS
--       called directly (bench/cuda_ref.cu, built as tide_cuda_ref beside build/tide;
--       target: Tide >= 90% of it) and to PyTorch
--   (3) training steps (forward, backward, Adam) of the MLP 784-256-256-10 at
--       batch 16 and 128 and of the Fashion-MNIST CNN at batch 64, eager and
--       compiled with tide.jit.compile, next to PyTorch eager and torch.compile
--       (bench/cuda_ref.py; target: compiled MLP batch 16 >= 2x PyTorch eager)
--   (4) the cost of one small op: x + 1 and x:add_(1) on 1000 float32s, enqueue
--       and synchronised, per op, next to PyTorch's (the launch path's overhead)
-- Float32 runs with TF32 off on both sides except in the tf32 case. Each Tide case
-- runs in a child process of its own, so that a failing case reports itself and
-- the rest still run. PyTorch is found as bench/train_bench.lua finds it
-- (TIDE_PYTHON, python3, /usr/bin/python3); it is a reference only.
-- usage: build/tide bench/cuda_bench.lua      (make bench-cuda)
-- environment:
--   TIDE_BENCH_DEVICE=cuda:N   the device (default cuda:0); a CPU device (cpu:1)
--                              dry-runs Tide's side only, the references skipped
--   TIDE_BENCH_QUICK=1         tiny sizes and few repetitions: a check that it runs
--   TIDE_CUDA_REF=path         tide_cuda_ref, when it is not beside the tide binary
--   TIDE_BENCH_COMPILE_MODE=m  torch.compile's mode (default: its default), e.g. reduce-overhead
local tide = require "tide"
local F = tide.nn.functional
local here = debug.getinfo(1, "S").source:sub(2)
local bench_dir = here:match("^(.*)/") or "."
local common = dofile(bench_dir .. "/common.lua")
local now = common.now

local function median(t)
  table.sort(t)
  return t[math.floor(#t / 2) + 1]
end

-- One line, for a table cell or a footnote.
local function oneline(s)
  return (tostring(s):gsub("%s*\n%s*", " | "):gsub("%s+$", ""))
end

-- -- the cases, each run in a child: prints "ok <values>" or "error <message>" ----------

local cases = {}

-- (1): median over `repeats` of the ten rounds: "enqueue_ms synchronised_ms"
function cases.seed(dev, n, repeats)
  n, repeats = tonumber(n), tonumber(repeats)
  tide.cuda.set_allow_tf32(false)
  local function rounds()
    local r
    for _ = 1, 10 do
      local x = tide.randn(n, n, { device = dev })
      r = x:matmul(x)
    end
    return r
  end
  rounds()
  tide.sync()
  local enq, total = {}, {}
  for i = 1, repeats do
    collectgarbage()
    local t0 = now()
    local r = rounds()
    enq[i] = now() - t0
    tide.sync()
    total[i] = now() - t0
    r:wait()
  end
  return string.format("%.4f %.4f", median(enq) * 1e3, median(total) * 1e3)
end

-- (4): x + 1, then x:add_(1), n times each on 1000 float32s: "enqueue_us synchronised_us" for each
function cases.small(dev, n)
  n = tonumber(n)
  local x = tide.randn(1000, { device = dev })
  local out = {}
  for _, f in ipairs { function() return x + 1 end, function() return x:add_(1) end } do
    for _ = 1, 200 do f() end
    tide.sync()
    collectgarbage()
    local t0 = now()
    for _ = 1, n do f() end
    local t1 = now()
    tide.sync()
    local t2 = now()
    out[#out + 1] = string.format("%.3f %.3f", (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6)
  end
  return table.concat(out, " ")
end

-- (2): an n x n matmul in `dtype` (or "tf32"), median of `rounds` rounds of `reps` calls: "TFLOP/s"
function cases.mm(dev, dtype, n, reps, rounds)
  n, reps, rounds = tonumber(n), tonumber(reps), tonumber(rounds)
  tide.cuda.set_allow_tf32(dtype == "tf32")
  local dt = dtype == "tf32" and "float32" or dtype
  local a = tide.randn(n, n, { device = dev }):to(dt)
  local b = tide.randn(n, n, { device = dev }):to(dt)
  for _ = 1, 3 do local _ = a:matmul(b) end
  tide.sync()
  local t = {}
  for i = 1, rounds do
    collectgarbage()   -- the last round's results, out of the timing
    local t0 = now()
    for _ = 1, reps do local _ = a:matmul(b) end
    tide.sync()
    t[i] = (now() - t0) / reps
  end
  return string.format("%.3f", 2 * n ^ 3 / median(t) * 1e-12)
end

-- (3): a training step, eager or compiled, median of `rounds` rounds of `steps`: "ms_per_step"
function cases.train(dev, kind, batch, steps, rounds, how)
  batch, steps, rounds = tonumber(batch), tonumber(steps), tonumber(rounds)
  tide.cuda.set_allow_tf32(false)
  tide.set_default_device(dev)
  tide.manual_seed(0)
  local m = common.model(kind):to(dev)
  local opt = tide.optim.Adam(m:parameters(), { lr = 1e-3 })
  local x = kind == "mlp" and tide.randn(batch, 784, { device = dev }) or tide.randn(batch, 1, 28, 28, { device = dev })
  local y = tide.randint(1, 11, { batch }, { device = dev })
  local function step(xb, yb)
    local loss = F.cross_entropy(m(xb), yb)
    opt:zero_grad()
    loss:backward()
    opt:step()
    return loss
  end
  local f = how == "compiled" and tide.jit.compile(step) or step
  local loss
  for _ = 1, math.max(5, math.floor(steps / 10)) do loss = f(x, y) end   -- warm-up (and capture)
  loss:item()
  local t = {}
  for i = 1, rounds do
    local t0 = now()
    for _ = 1, steps do loss = f(x, y) end
    tide.sync()
    t[i] = (now() - t0) / steps
  end
  local l = loss:item()
  if l ~= l then error("the loss is NaN") end
  -- how the compiled step replayed: one task, a device graph, or why not
  local g = how == "compiled" and f:graph() or ""
  local replay, device = g:match("%-%- (replayed [^;\n]*)"), g:match("%-%- on the device: ([^\n]*)")
  how = replay and replay .. (device and "; on the device: " .. device or "") or nil
  return string.format("%.4f", median(t) * 1e3) .. (how and " | " .. how or "")
end

if arg[1] == "--case" then
  local ok, r = pcall(cases[arg[2]], unpack(arg, 3))
  if ok then
    local synced, err = pcall(tide.sync)   -- an error raised late, by the device
    if not synced then ok, r = false, err end
  end
  io.write(ok and "ok " .. r or "error " .. oneline(r), "\n")
  os.exit(0)
end

-- -- the parent: settings, the references, then the cases --------------------------------

local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function env_on(name)
  local v = os.getenv(name)
  return v ~= nil and v ~= "" and v ~= "0"
end
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
-- Runs a shell command, for at most `limit` seconds where coreutils' timeout is
-- found: its output (stdout, and stderr unless redirected) as lines, and why it
-- failed when it exited non-zero ("exit status N", "timed out after N s").
local has_timeout = os.execute("command -v timeout >/dev/null 2>&1") == 0
local function lines_of(cmd, limit)
  if has_timeout and limit then cmd = string.format("timeout -k 10 %d %s", limit, cmd) end
  local p = assert(io.popen("{ " .. cmd .. "; }; echo \"exit-status $?\""))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  local rc = tonumber(table.remove(out):match("exit%-status (%d+)"))
  local why
  if has_timeout and limit and (rc == 124 or rc == 137) then why = string.format("timed out after %d s", limit)
  elseif rc ~= 0 then why = "exit status " .. rc .. (rc > 128 and " (killed by signal " .. rc - 128 .. ")" or "") end
  return out, why
end

local quick = env_on("TIDE_BENCH_QUICK")
local device = os.getenv("TIDE_BENCH_DEVICE")
if not device or device == "" then device = "cuda:0" end
local S = quick and {
  seed_n = 200, seed_repeats = 3, small_n = 500, mm_n = 256, mm_reps = 3, mm_rounds = 3, rounds = 2,
  train = { { "mlp", 16, 5 }, { "mlp", 128, 5 }, { "cnn", 64, 3 } },
} or {
  seed_n = 1000, seed_repeats = 5, small_n = 20000, mm_n = 4096, mm_reps = 50, mm_rounds = 10, rounds = 5,
  train = { { "mlp", 16, 200 }, { "mlp", 128, 200 }, { "cnn", 64, 50 } },
}
local mm_cases = { "float32", "tf32", "bfloat16", "float16" }
local compile_mode = os.getenv("TIDE_BENCH_COMPILE_MODE")
if compile_mode == "" then compile_mode = nil end

local cuda_idx = device:match("^cuda:(%d+)$")
local gpu_name
local on_gpu = cuda_idx ~= nil
if on_gpu then
  cuda_idx = tonumber(cuda_idx)
  local ok, why = tide.cuda.is_available()
  if not ok then
    print("CUDA benchmarks skipped: tide.cuda.is_available() is false: " .. why)
    os.exit(0)
  end
  if cuda_idx >= tide.cuda.device_count() then
    print(string.format("CUDA benchmarks skipped: no device %s (%s)", device, tide.cuda.status()))
    os.exit(0)
  end
  local status = tide.cuda.status()
  gpu_name = status:match("cuda:" .. cuda_idx .. " (.-) %(sm_") or "?"
  print(string.format("gpu: %s on %s (tide.cuda.status(): %s)", gpu_name, device, status))
else
  local ok = pcall(tide.empty, 0, { device = device })
  if not ok then
    print(string.format("TIDE_BENCH_DEVICE=%s: not a device here (%s)", device, table.concat(tide.devices(), ", ")))
    os.exit(1)
  end
  print(string.format("dry run on %s (TIDE_BENCH_DEVICE; %s, %d threads): Tide's side only", device,
    common.cpu_model(), tide.get_num_threads()))
end
if quick then print("quick sizes (TIDE_BENCH_QUICK): the figures only show that the bench runs") end
io.stdout:flush()

-- The tide binary (or luajit) runs the children.
local interp = arg[-1] or "luajit"

-- A reference measured on another GPU than Tide's is said so.
local function check_gpu(what, name)
  if name and gpu_name and name ~= gpu_name then
    print(string.format("    warning: the %s reference ran on %s, Tide on %s", what, name, gpu_name))
  end
end

-- cuBLAS: tide_cuda_ref, beside the tide binary or libtide, or named by TIDE_CUDA_REF.
local blas, blas_why = {}, nil
if not on_gpu then
  blas_why = "skipped: " .. device .. " is not a CUDA device"
else
  local path = os.getenv("TIDE_CUDA_REF")
  if not path or path == "" then
    path = nil
    local dirs = { (arg[-1] or ""):match("^(.*)/[^/]*$"), (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$"),
                   bench_dir .. "/../build" }
    for i = 1, 3 do
      if dirs[i] and exists(dirs[i] .. "/tide_cuda_ref") then path = dirs[i] .. "/tide_cuda_ref"; break end
    end
  end
  if not path or not exists(path) then
    blas_why = "no tide_cuda_ref beside the tide binary (it is built where CMake finds the CUDA toolkit; " ..
      "TIDE_CUDA_REF=path names it)"
  else
    local out, status = lines_of(string.format("%s %d %d %d %d 2>&1", shq(path), S.mm_n, S.mm_reps, S.mm_rounds,
      cuda_idx), 300)
    local errs = {}
    for _, l in ipairs(out) do
      local k, v = l:match("^(%S+) (.*)$")
      if k == "gpu" or k == "versions" then blas[k] = v
      elseif k and tonumber(v) then blas[k] = tonumber(v)
      else errs[#errs + 1] = l end
    end
    if not blas.gpu then
      blas_why = (#errs > 0 and table.concat(errs, " | ") or "tide_cuda_ref printed nothing") ..
        (status and " (" .. status .. ")" or "")
    else
      print(string.format("reference: cuBLAS called directly, on %s (%s; %s)", blas.gpu, blas.versions or "?", path))
      check_gpu("cuBLAS", blas.gpu)
      if #errs > 0 or status then blas.errors = table.concat(errs, " | ") .. (status and " (" .. status .. ")" or "") end
    end
  end
end
if blas_why then print("cuBLAS reference unavailable: " .. blas_why) end
io.stdout:flush()

-- PyTorch: bench/cuda_ref.py, one run for every case.
local torch, torch_why, torch_notes = {}, nil, {}
if not on_gpu then
  torch_why = "skipped: " .. device .. " is not a CUDA device"
else
  local python = common.torch_python()
  if not python then
    torch_why = "no python3 with torch (set TIDE_PYTHON; the project never needs it)"
  else
    print("running the PyTorch reference (torch.compile may take a minute or two) ...")
    io.stdout:flush()
    local specs = {}
    for _, c in ipairs(S.train) do specs[#specs + 1] = table.concat(c, ":") end
    local errfile = os.tmpname()
    if compile_mode then specs[#specs + 1] = "--compile-mode " .. shq(compile_mode) end
    local out, status = lines_of(string.format("%s %s --device %d --seed-n %d --seed-repeats %d --small-n %d --mm-n %d " ..
      "--mm-reps %d --mm-rounds %d --rounds %d --train %s 2>%s", python, shq(bench_dir .. "/cuda_ref.py"), cuda_idx,
      S.seed_n, S.seed_repeats, S.small_n, S.mm_n, S.mm_reps, S.mm_rounds, S.rounds, table.concat(specs, " "),
      shq(errfile)), 420)
    for _, l in ipairs(out) do
      local k, v = l:match("^(%S+) (.*)$")
      if k == "unavailable" then torch_why = v
      elseif k == "gpu" or k == "versions" then torch[k] = v
      elseif k and v:match("^unavailable ") then torch[k], torch_notes[k] = "n/a", v:sub(13)
      elseif k then torch[k] = v end
    end
    if not torch.gpu and not torch_why then
      local f = io.open(errfile)
      local err = f and f:read("*a") or ""
      if f then f:close() end
      local tail = {}
      for l in err:gmatch("[^\n]+") do tail[#tail + 1] = l end
      torch_why = "bench/cuda_ref.py failed" .. (status and " (" .. status .. ")" or "") .. ": " ..
        oneline(table.concat(tail, "\n", math.max(1, #tail - 2)))
    end
    os.remove(errfile)
    if torch.gpu then
      print(string.format("reference: PyTorch on %s (%s; %s)", torch.gpu, torch.versions or "?", python))
      check_gpu("PyTorch", torch.gpu)
    end
  end
end
if torch_why then print("PyTorch reference unavailable: " .. torch_why) end
io.stdout:flush()

-- Runs a case in a child: its values (a string), or nil and why.
local function child(...)
  local args = {}
  for i, a in ipairs { ... } do args[i] = shq(a) end
  local out, status = lines_of(string.format("%s %s --case %s 2>&1", shq(interp), shq(here), table.concat(args, " ")),
    240)
  for _, l in ipairs(out) do
    local v = l:match("^ok (.*)$")
    if v then return v end
    local e = l:match("^error (.*)$")
    if e then return nil, e end
  end
  return nil, "the child ended without a result (" .. (status or "exit status 0") .. "): " ..
    oneline(table.concat(out, "\n", math.max(1, #out - 3)))
end

local notes = {}
-- A figure for a table cell; a failure becomes "n/a [k]" with footnote k.
local function cell(v, fmt, why)
  if v then return string.format(fmt, v) end
  if not why then return "-" end
  for i, n in ipairs(notes) do
    if n == why then return string.format("n/a [%d]", i) end
  end
  notes[#notes + 1] = why
  return string.format("n/a [%d]", #notes)
end
local function flush_notes()
  for i, n in ipairs(notes) do print(string.format("    [%d] %s", i, n)) end
  notes = {}
  io.stdout:flush()
end

-- (1) --------------------------------------------------------------------------------------
do
  local v, why = child("seed", device, S.seed_n, S.seed_repeats)
  local enq, total = (v or ""):match("(%S+) (%S+)")
  local what = string.format("(1) 10 x (randn %dx%d, matmul) on %s, median of %d:", S.seed_n, S.seed_n, device,
    S.seed_repeats)
  if v then
    print(string.format("%s enqueue %.2f ms, synchronised %.2f ms", what, tonumber(enq), tonumber(total)))
  else
    print(string.format("%s failed: %s", what, why))
  end
  local te, tt = (torch.seed or ""):match("(%S+) (%S+)")
  if te then
    print(string.format("    PyTorch (same GPU, same loop, torch.cuda.synchronize()): enqueue %.2f ms, synchronised " ..
      "%.2f ms%s", tonumber(te), tonumber(tt), v and string.format(" (synchronised, PyTorch / Tide: %.2fx)",
      tonumber(tt) / tonumber(total)) or ""))
  else
    print("    PyTorch: " .. (torch_notes.seed or torch_why or "no figure"))
  end
  io.stdout:flush()
end

-- (2) --------------------------------------------------------------------------------------
do
  print(string.format("(2) matmul %dx%d on %s, TFLOP/s, median of %d rounds of %d calls (target: Tide >= 90%% of " ..
    "cuBLAS)", S.mm_n, S.mm_n, device, S.mm_rounds, S.mm_reps))
  print(string.format("    %-10s %10s %10s %12s %10s", "case", "Tide", "cuBLAS", "Tide/cuBLAS", "PyTorch"))
  for _, dt in ipairs(mm_cases) do
    local v, why = child("mm", device, dt, S.mm_n, S.mm_reps, S.mm_rounds)
    v = tonumber(v)
    local ref = blas[dt]
    local pt = tonumber(torch["mm:" .. dt])
    print(string.format("    %-10s %10s %10s %12s %10s", dt, cell(v, "%.2f", why),
      cell(ref, "%.2f", blas.gpu and (blas.errors or "no figure") or nil),
      v and ref and string.format("%.0f%%", 100 * v / ref) or "-",
      cell(pt, "%.2f", torch_notes["mm:" .. dt])))
  end
  flush_notes()
end

-- (3) --------------------------------------------------------------------------------------
do
  print(string.format("(3) training steps (forward, backward, Adam) on %s, ms per step, median of %d rounds " ..
    "(torch.compile mode: %s):", device, S.rounds, compile_mode or "default"))
  print(string.format("    %-14s %11s %14s %14s %14s %9s", "case", "Tide eager", "Tide compiled", "PyTorch eager",
    "torch.compile", "speedup"))
  local target, hows = nil, {}
  for _, c in ipairs(S.train) do
    local kind, batch, steps = c[1], c[2], c[3]
    local key = table.concat(c, ":")
    local ev, ew = child("train", device, kind, batch, steps, S.rounds, "eager")
    local cv, cw = child("train", device, kind, batch, steps, S.rounds, "compiled")
    local replayed = cv and cv:match(" | (.*)$")
    if replayed then hows[#hows + 1] = string.format("    %s batch %s compiled: %s", kind, batch, replayed) end
    ev, cv = tonumber(ev), cv and tonumber(cv:match("^(%S+)"))
    local pe, pc = tonumber(torch[key .. ":eager"]), tonumber(torch[key .. ":compiled"])
    print(string.format("    %-14s %11s %14s %14s %14s %9s", kind .. " batch " .. batch, cell(ev, "%.3f", ew),
      cell(cv, "%.3f", cw), cell(pe, "%.3f", torch_notes[key .. ":eager"]),
      cell(pc, "%.3f", torch_notes[key .. ":compiled"]), cv and pe and string.format("%.2fx", pe / cv) or "-"))
    if kind == "mlp" and batch == 16 then
      target = cv and pe and string.format("%.2fx (PyTorch eager %.3f ms / Tide compiled %.3f ms)", pe / cv, pe, cv)
        or "no figure (" .. (cv and "no PyTorch eager figure" or "no compiled Tide figure") .. ")"
    end
  end
  flush_notes()
  print("    speedup: PyTorch eager / Tide compiled")
  if #hows > 0 then print("    how the compiled steps replayed:\n" .. table.concat(hows, "\n")) end
  if target then print("    target: the compiled MLP batch 16 step >= 2x faster than PyTorch eager: " .. target) end
end

-- (4) --------------------------------------------------------------------------------------
do
  local v, why = child("small", device, S.small_n)
  local t = {}
  for w in (v or ""):gmatch("%S+") do t[#t + 1] = tonumber(w) end
  local p = {}
  for w in (torch.small or ""):gmatch("%S+") do p[#p + 1] = tonumber(w) end
  print(string.format("(4) one small op on 1000 float32s on %s, us per op over %d in a row:", device,
    S.small_n))
  for i, name in ipairs { "x + 1", "x:add_(1)" } do
    local tide_s = v and string.format("enqueue %.2f, synchronised %.2f", t[2 * i - 1], t[2 * i]) or ("failed: " .. why)
    local torch_s = #p == 4 and string.format("PyTorch enqueue %.2f, synchronised %.2f", p[2 * i - 1], p[2 * i])
      or ("PyTorch: " .. (torch_notes.small or torch_why or "no figure"))
    print(string.format("    %-10s Tide %s; %s", name, tide_s, torch_s))
  end
  io.stdout:flush()
end
