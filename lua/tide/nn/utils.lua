--- tide.nn.utils: gradient clipping and flattening parameters to one vector,
-- as torch.nn.utils. Clipping runs on the device with tensor ops and reads
-- nothing back (the total norm stays a 0-d tensor), so it runs asynchronously
-- and inside tide.jit.compile'd steps. Parametrizations (nn.utils.parametrize,
-- nn.utils.parametrizations, nn.utils.weight_norm / spectral_norm) are in
-- tide.nn.parametrize and tide.nn.parametrizations. Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local fail = B.fail
local is_tensor = tide.is_tensor

return function(nn)
  local utils = nn.utils or {}
  nn.utils = utils
  local huge = math.huge

  -- parameters: a tensor, or a list of tensors (what module:parameters() returns).
  local function param_list(parameters, fname)
    if is_tensor(parameters) then return { parameters } end
    if type(parameters) ~= "table" or nn.is_module(parameters) then
      fail(string.format("%s: parameters must be a tensor or a table of tensors (module:parameters()), got %s", fname,
        nn.is_module(parameters) and "a module" or type(parameters)))
    end
    for i = 1, #parameters do
      if not is_tensor(parameters[i]) then
        fail(string.format("%s: parameter %d must be a tensor, got %s", fname, i, type(parameters[i])))
      end
    end
    return parameters
  end

  -- The gradients of the parameters that have one.
  local function grads_of(params)
    local r = {}
    for _, p in ipairs(params) do
      local g = p.grad
      if g ~= nil then r[#r + 1] = g end
    end
    return r
  end

  --- nn.utils.clip_grad_norm_(parameters, max_norm, opts): scales the gradients
  -- of parameters in place so that their total norm (the norm of all of them
  -- as one vector) is at most max_norm, by min(1, max_norm / (total + 1e-6)),
  -- a tensor op: nothing is read back unless error_if_nonfinite is set.
  -- Parameters without a gradient are skipped.
  -- @param parameters a tensor or a table of tensors (module:parameters())
  -- @param max_norm a number
  -- @param opts {norm_type = 2 (a positive number or math.huge), error_if_nonfinite = false, foreach (ignored)}
  -- @return the total norm before clipping, a 0-d tensor (float32 with no gradients)
  -- @usage loss:backward(); nn.utils.clip_grad_norm_(model:parameters(), 1.0); opt:step()
  function utils.clip_grad_norm_(parameters, max_norm, opts)
    local fname = "clip_grad_norm_"
    local params = param_list(parameters, fname)
    if type(max_norm) ~= "number" or max_norm ~= max_norm then
      fail(string.format("%s: max_norm must be a number, got %s", fname, tostring(max_norm)))
    end
    opts = opts or {}
    if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", fname, type(opts))) end
    local p = opts.norm_type or 2
    if p == "inf" then p = huge end
    if type(p) ~= "number" or not (p > 0) then
      fail(string.format("%s: norm_type must be a positive number or math.huge, got %s", fname, tostring(p)))
    end
    if opts.foreach ~= nil and type(opts.foreach) ~= "boolean" then
      fail(string.format("%s: foreach must be a boolean or nil, got %s", fname, type(opts.foreach)))
    end
    local grads = grads_of(params)
    if #grads == 0 then return tide.zeros({}) end
    -- one norm per gradient, in a common dtype on the first gradient's device
    local dtype, dev = grads[1]:dtype(), grads[1]:device()
    for _, g in ipairs(grads) do
      if g:dtype() ~= dtype then dtype = (g:dtype() == "float64" or dtype == "float64") and "float64" or "float32" end
    end
    local norms = {}
    for i, g in ipairs(grads) do
      local n = g:numel() == 0 and tide.zeros({}, { dtype = g:dtype(), device = g:device() })
        or nn._pnorm(g:reshape(-1), p, 1)
      norms[i] = n:to(dtype, dev)
    end
    local total = nn._pnorm(tide.stack(norms), p, 1)
    if opts.error_if_nonfinite then
      local v = total:item()
      if v ~= v or v == huge or v == -huge then
        fail(string.format("%s: the total norm of order %g of the gradients is non-finite (%s), so it cannot be " ..
          "clipped; to scale the gradients by it anyway, set error_if_nonfinite = false", fname, p, tostring(v)))
      end
    end
    local coef = (max_norm / (total + 1e-6)):clamp(nil, 1)
    tide.no_grad(function()
      for _, g in ipairs(grads) do g:mul_(coef:to(g:dtype(), g:device())) end
    end)
    return total
  end

  --- nn.utils.clip_grad_value_(parameters, clip_value): clamps the gradients
  -- of parameters in place to [-clip_value, clip_value]; parameters without
  -- a gradient are skipped.
  -- @param parameters a tensor or a table of tensors (module:parameters())
  -- @param clip_value a non-negative number
  -- @usage nn.utils.clip_grad_value_(model:parameters(), 0.5)
  function utils.clip_grad_value_(parameters, clip_value)
    local params = param_list(parameters, "clip_grad_value_")
    if type(clip_value) ~= "number" or not (clip_value >= 0) then
      fail("clip_grad_value_: clip_value must be a non-negative number, got " .. tostring(clip_value))
    end
    tide.no_grad(function()
      for _, g in ipairs(grads_of(params)) do g:clamp_(-clip_value, clip_value) end
    end)
  end

  --- nn.utils.parameters_to_vector(parameters): the parameters flattened and
  -- joined into one 1-d tensor (a copy, differentiable), in order.
  -- @param parameters a tensor or a non-empty table of tensors on one device
  -- @return a 1-d tensor
  -- @usage local v = nn.utils.parameters_to_vector(model:parameters())
  function utils.parameters_to_vector(parameters)
    local params = param_list(parameters, "parameters_to_vector")
    if #params == 0 then fail("parameters_to_vector: no parameters given") end
    local flat, dev = {}, params[1]:device()
    for i, p in ipairs(params) do
      if p:device() ~= dev then
        fail(string.format("parameters_to_vector: parameter %d is on %s but parameter 1 is on %s", i, p:device(), dev))
      end
      flat[i] = p:reshape(-1)
    end
    return tide.cat(flat, 1)
  end

  --- nn.utils.vector_to_parameters(vec, parameters): copies consecutive slices
  -- of the 1-d vec into the parameters, in place and without gradient (the
  -- inverse of parameters_to_vector).
  -- @param vec a 1-d tensor of as many elements as the parameters hold
  -- @param parameters a tensor or a table of tensors
  -- @usage nn.utils.vector_to_parameters(v, model:parameters())
  function utils.vector_to_parameters(vec, parameters)
    local fname = "vector_to_parameters"
    if not is_tensor(vec) then fail(fname .. ": vec must be a tensor, got " .. type(vec)) end
    if vec:dim() ~= 1 then
      fail(string.format("%s: vec must be 1-d, got shape [%s]", fname, table.concat(vec:shape(), ",")))
    end
    local params = param_list(parameters, fname)
    local total = 0
    for _, p in ipairs(params) do total = total + p:numel() end
    if total ~= vec:numel() then
      fail(string.format("%s: vec has %d elements but the parameters hold %d", fname, vec:numel(), total))
    end
    tide.no_grad(function()
      local start = 1
      for _, p in ipairs(params) do
        local n = p:numel()
        if n > 0 then p:copy_(vec:narrow(1, start, n):view(p:shape())) end
        start = start + n
      end
    end)
  end
end
