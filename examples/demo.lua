-- demo.lua: a short tour of real tensor work, run by `make demo` until the
-- training example exists: least-squares fit by gradient descent, by hand.
local tide = require "tide"
tide.manual_seed(0)
local n, d = 1000, 8
local true_w = tide.arange(1, d + 1):float():view(d, 1) / d
local X = tide.ones(n, d)
local y = X:matmul(true_w)
local w = tide.zeros(d, 1)
for step = 1, 200 do
  local grad = X:t():matmul(X:matmul(w) - y) * (2 / n)
  w:sub_(grad * 0.01)
end
print("weights found:")
print(w:t())
