-- slice_grad_bench.lua: forward + backward of an LSTM-like loop that takes one
-- time step per slice (x:select(1, t)) of an [L, N, 4H] input projection, the
-- pattern whose backward used to cost O(L^2 * N * H): ms per step and peak
-- memory of the backward for L = 64 and 256 (H = 128, batch 32); then the same
-- for nn.LSTM(128, 128), which slices its input projection per time step.
-- usage: build/tide bench/slice_grad_bench.lua
local tide = require "tide"
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")
local now = common.now

local H, N, I = 128, 32, 128

local function report(name, L, n, step)
  for _ = 1, 2 do step() end
  tide.sync()
  collectgarbage()
  tide.reset_peak_memory()
  local base = tide.memory_stats().in_use
  local t0 = now()
  for _ = 1, n do step() end
  tide.sync()
  local ms = (now() - t0) / n * 1e3
  print(string.format("%-9s L = %3d: %8.2f ms per forward+backward, peak %6.1f MiB above the start", name, L, ms,
                      (tide.memory_stats().peak - base) / 2^20))
end

local function run(L)
  tide.manual_seed(0)
  local x = tide.randn(L, N, I)
  local w_ih = tide.randn(I, 4 * H):mul(0.05):requires_grad_()
  local w_hh = tide.randn(H, 4 * H):mul(0.05):requires_grad_()
  local function step()
    local gi = x:matmul(w_ih)   -- [L, N, 4H]
    local h, c = tide.zeros(N, H), tide.zeros(N, H)
    local hs = {}
    for t = 1, L do
      local g = gi:select(1, t) + h:matmul(w_hh)
      local i, f, gg, o = unpack(g:chunk(4, 2))
      c = f:sigmoid() * c + i:sigmoid() * gg:tanh()
      h = o:sigmoid() * c:tanh()
      hs[t] = h
    end
    local loss = tide.stack(hs, 1):sum()
    w_ih.grad, w_hh.grad = nil, nil
    loss:backward()
    return loss
  end
  report("loop", L, L <= 64 and 10 or 4, step)
end

local function run_lstm(L)
  tide.manual_seed(0)
  local m = tide.nn.LSTM(I, H)
  local x = tide.randn(L, N, I)
  report("nn.LSTM", L, L <= 64 and 10 or 4, function()
    m:zero_grad()
    local out = m(x)
    out:sum():backward()
  end)
end

print(string.format("LSTM-like loop, H = %d, batch %d, %d threads, %s", H, N, tide.get_num_threads(), common.cpu_model()))
for _, L in ipairs { 64, 256 } do run(L) end
for _, L in ipairs { 64, 256 } do run_lstm(L) end
