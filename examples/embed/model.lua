-- model.lua - the model script of examples/embed/lua_host.c: a two-layer
-- perceptron whose weights the host owns. The host loads this file, calls
-- forward with tensors wrapped around its buffers and reads what it returns.
local tide = require "tide"

local M = {}

--- forward(x, w1, b1, w2): relu(x @ w1 + b1) @ w2, a [batch, out] tensor.
function M.forward(x, w1, b1, w2)
  assert(tide.is_tensor(x), "forward: x must be a tensor")
  return x:matmul(w1):add(b1):relu():matmul(w2)
end

--- scale_(x, s): multiplies x by s in place, in the host's own buffer.
function M.scale_(x, s)
  x:mul_(s)
  x:wait()
end

return M
