-- mlp_regression.lua: a small MLP fitted to noisy samples of a known function
-- (y = sin(3 x1) + x2^2 / 2), on generated data: the training loop of a
-- PyTorch script, in Lua. Prints the loss as it falls and the error on
-- held-out points at the end.
--
--   build/tide examples/mlp_regression.lua [steps (default 2000)] [seed (default 0)]
local tide = require "tide"
local nn, F, optim = tide.nn, tide.nn.functional, tide.optim

local steps, seed = tonumber(arg[1]) or 2000, tonumber(arg[2]) or 0
tide.manual_seed(seed)

local function truth(x) return (x:select(2, 1) * 3):sin() + x:select(2, 2) ^ 2 / 2 end
local function sample(n)
  local x = tide.rand(n, 2) * 4 - 2
  return x, (truth(x) + tide.randn(n) * 0.05):view(n, 1)
end
local train_x, train_y = sample(1024)
local test_x, test_y = sample(256)

local model = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
local opt = optim.Adam(model:parameters(), { lr = 1e-2 })
local sched = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = steps })
local loader = tide.data.DataLoader(tide.data.TensorDataset(train_x, train_y),
  { batch_size = 128, shuffle = true, seed = seed })

local step = 0
while step < steps do
  for xb, yb in loader:iter() do
    local loss = F.mse_loss(model(xb), yb)
    opt:zero_grad()
    loss:backward()
    opt:step()
    sched:step()
    step = step + 1
    if step % math.max(1, math.floor(steps / 5)) == 0 then
      print(string.format("step %5d  loss %.5f  lr %.5f", step, loss:item(), sched:get_last_lr()[1]))
    end
    if step == steps then break end
  end
end

local test_mse = tide.no_grad(function() return F.mse_loss(model(test_x), test_y):item() end)
print(string.format("held-out mean squared error %.5f (noise variance 0.0025)", test_mse))
