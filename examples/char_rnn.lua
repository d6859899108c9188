-- char_rnn.lua: a character-level language model, Torch7's char-rnn in Tide:
-- an embedding, a two-layer LSTM and a linear read-out learn to predict the
-- next character of a text (by default the GPL, which every Debian system has),
-- then write some text of their own, sampled one character at a time.
--
--   build/tide examples/char_rnn.lua [--steps 400] [--seq-len 64] [--batch-size 32]
--     [--hidden 128] [--lr 0.003] [--data FILE] [--device cpu] [--seed 0]
--     [--sample 300] [--temperature 0.8]
local tide = require "tide"
local ffi = require "ffi"
local nn, F = tide.nn, tide.nn.functional

ffi.cdef [[
  struct tide_ex_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct tide_ex_timespec * ts);
]]
local ts = ffi.new("struct tide_ex_timespec")
local function now() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9 end

-- -- options ------------------------------------------------------------------------------

local defaults = {
  steps = 400, ["seq-len"] = 64, ["batch-size"] = 32, hidden = 128, lr = 3e-3,
  data = "/usr/share/common-licenses/GPL-3", device = "cpu", seed = 0, sample = 300, temperature = 0.8,
}
local function usage(msg)
  io.stderr:write((msg and ("char_rnn: " .. msg .. "\n") or "") ..
    "usage: tide examples/char_rnn.lua [--steps N] [--seq-len N] [--batch-size N] [--hidden N] [--lr X]\n" ..
    "         [--data FILE] [--device cpu|cpu:N|cuda:N] [--seed N] [--sample N] [--temperature X]\n")
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
if opt.temperature <= 0 then usage("--temperature must be positive") end
tide.manual_seed(opt.seed)
tide.set_default_device(opt.device)

-- -- data: the text as 1-based symbol ids ---------------------------------------------------

local f = io.open(opt.data, "rb")
if not f then usage("cannot read " .. opt.data .. " (pass --data FILE)") end
local text = f:read("*a")
f:close()
local L, B = opt["seq-len"], opt["batch-size"]
if #text < L + 2 then usage(string.format("%s has %d characters, fewer than --seq-len + 2", opt.data, #text)) end

local symbols, id_of = {}, {}
for c in text:gmatch(".") do
  if not id_of[c] then symbols[#symbols + 1] = c; id_of[c] = true end
end
table.sort(symbols)
for k, c in ipairs(symbols) do id_of[c] = k end
local ids = {}
for k = 1, #text do ids[k] = id_of[text:sub(k, k)] end
local data = tide.tensor(ids, "int64")
local V = #symbols

-- A batch of B random windows: inputs [L, B] and the characters that follow each.
local steps_in_window = tide.arange(0, L, { dtype = "int64" }):view(L, 1)
local function batch()
  local start = tide.randint(1, #text - L, { B }):view(1, B)   -- 1 .. #text - L - 1
  local at = (steps_in_window + start):reshape(-1)
  return data:index_select(1, at):view(L, B), data:index_select(1, at + 1):view(L, B)
end

-- -- model ---------------------------------------------------------------------------------

local CharRNN = nn.Module:extend("CharRNN")
function CharRNN:init(vocab, hidden)
  self.embed = nn.Embedding(vocab, 64)
  self.lstm = nn.LSTM(64, hidden, { num_layers = 2 })
  self.out = nn.Linear(hidden, vocab)
end
-- x [L, B] ids -> logits [L, B, V] and the state to carry on from
function CharRNN:forward(x, state)
  local h, hn, cn = self.lstm(self.embed(x), state)
  return self.out(h), { hn, cn }
end

local model = CharRNN(V, opt.hidden)
local n_params = 0
for _, p in ipairs(model:parameters()) do n_params = n_params + p:numel() end
print(string.format("char-rnn: %d characters of %s, %d symbols; model %d parameters on %s", #text, opt.data, V,
  n_params, opt.device))

-- -- training ------------------------------------------------------------------------------

local adam = tide.optim.Adam(model:parameters(), { lr = opt.lr })
local sched = tide.optim.lr_scheduler.CosineAnnealingLR(adam, { T_max = opt.steps, eta_min = opt.lr / 10 })
local every = math.max(1, math.floor(opt.steps / 10))
local t0, last = now(), nil
for step = 1, opt.steps do
  local x, y = batch()
  local logits = model(x)
  local loss = F.cross_entropy(logits:view(L * B, V), y:view(-1))
  adam:zero_grad()
  loss:backward()
  nn.utils.clip_grad_norm_(model:parameters(), 1.0)
  adam:step()
  sched:step()
  if step % every == 0 or step == 1 or step == opt.steps then
    last = loss:item()   -- waits for the step: only now and then
    print(string.format("step %4d/%d  loss %.3f  (%.0f characters/s)", step, opt.steps, last,
      step * L * B / math.max(now() - t0, 1e-9)))
  end
end

-- -- sampling ------------------------------------------------------------------------------

-- One character at a time from the model's distribution sharpened by the
-- temperature, by the Gumbel-max trick: argmax(logits / T + Gumbel noise).
model:eval()
local out = {}
tide.no_grad(function()
  local x, state = tide.tensor({ { id_of[text:sub(1, 1)] } }, "int64"), nil
  out[1] = text:sub(1, 1)
  for _ = 2, opt.sample do
    local logits
    logits, state = model(x, state)
    local u = tide.rand(V):clamp(1e-12, 1)
    local pick = (logits:view(V) / opt.temperature - (-u:log()):log()):argmax()
    out[#out + 1] = symbols[pick:item()]
    x = pick:view(1, 1)
  end
end)
print(string.format("sample (temperature %.2f):\n%s", opt.temperature, table.concat(out)))
print(string.format("final loss %.3f after %d steps", last, opt.steps))
