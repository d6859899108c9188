--- tide.nn.utils.parametrize: a module's tensor computed from others on each
-- read, as torch.nn.utils.parametrize. register_parametrization moves
-- module.weight to module.parametrizations.weight.original (the tensor that
-- parameters(), optimizers and state_dict see, under PyTorch's names) and gives
-- the module a metatable whose reads of `weight` run the parametrizations and
-- whose writes run their right_inverse. The parametrizations themselves
-- (weight_norm, spectral_norm, orthogonal) are in tide.nn.parametrizations.
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.parametrize")(nn)`.
local tide = require "tide"
local B = require "bindings.ffi"
local ffi = B.ffi
local fail = B.fail
local is_tensor = tide.is_tensor
local no_grad = tide.no_grad

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end
local function pack(...) return { n = select("#", ...), ... } end

-- The address of a tensor's C object: two cdata may hold the same tensor.
local tensor_ptr = ffi.typeof("struct tide_tensor *")
local function addr(t) return tonumber(ffi.cast("intptr_t", ffi.cast(tensor_ptr, t))) end

return function(nn)
  local utils = nn.utils or {}
  nn.utils = utils
  local P = utils.parametrize or {}
  utils.parametrize = P
  local is_module = nn.is_module

  local function describe(v)
    if is_module(v) then return "module " .. v:class_name() end
    return is_tensor(v) and "tensor" or type(v)
  end

  -- A right_inverse's results as one tensor or a list of them: it may return
  -- a tensor, a list, or several tensors (as a Python tuple).
  local function one_or_list(...)
    local r = pack(...)
    if r.n == 1 then return r[1] end
    r.n = nil
    return r
  end

  -- -- the cache of parametrize.cached ---------------------------------------------------------

  local cache, cache_depth = nil, 0

  local function evaluate(module, name, plist)
    if cache == nil then return plist() end
    local per = cache[module]
    if per == nil then per = {}; cache[module] = per end
    local t = per[name]
    if t == nil then t = plist(); per[name] = t end
    return t
  end

  -- -- ParametrizationList ------------------------------------------------------------------------

  --- nn.utils.parametrize.ParametrizationList: the parametrizations of one
  -- tensor (children "0", "1", ... applied in order) and its original(s):
  -- `original`, or `original0`, `original1`, ... when the first
  -- parametrization's right_inverse gives several tensors. Made by
  -- register_parametrization; plist() computes the parametrized tensor.
  local PList = nn.Module.extend(nn.ModuleList, "ParametrizationList")   -- ModuleList:extend appends
  P.ParametrizationList = PList

  function PList:forward()
    local x
    if self.is_tensor then
      x = self[1](self.original)
    else
      local o = {}
      for i = 1, self.ntensors do o[i] = self["original" .. (i - 1)] end
      x = self[1](unpack(o, 1, self.ntensors))
    end
    for i = 2, #self do x = self[i](x) end
    return x
  end

  -- Stores value as original `key`: in place where shape and dtype allow, so
  -- that the tensor an optimizer holds stays the parameter (PyTorch's set_).
  local function set_original(self, key, value)
    local o = self[key]
    if addr(o) == addr(value) then return end
    if shape_str(o) == shape_str(value) and o:dtype() == value:dtype() then
      o:copy_(value)
    elseif self._parameters[key] ~= nil then
      self:register_parameter(key, value:detach():clone():requires_grad_(o.requires_grad))
    else
      self:register_buffer(key, value:detach():clone())
    end
  end

  local function check_value(self, value, i, dtype)
    if not is_tensor(value) then
      fail(string.format("%s: right_inverse must give %s, got %s", self.where,
        self.is_tensor and "a tensor" or "tensors", describe(value)))
    end
    if value:dtype() ~= dtype then
      fail(string.format("%s: right_inverse gives %s for original%s, which is %s", self.where, value:dtype(),
        i or "", dtype))
    end
  end

  --- plist:right_inverse(value): sets the originals so that the list computes
  -- value, by each parametrization's right_inverse, last first, without
  -- gradients. Assigning module.weight = value calls it.
  -- @param value a tensor of the parametrized tensor's shape
  -- @usage m.weight = tide.eye(3)
  function PList:right_inverse(value)
    no_grad(function()
      for i = #self, 1, -1 do
        local m = self[i]
        if m.right_inverse == nil then
          fail(string.format("%s: cannot assign: parametrization %d (%s) has no right_inverse", self.where, i,
            m:class_name()))
        end
        value = one_or_list(m:right_inverse(value))
      end
      if self.is_tensor then
        check_value(self, value, nil, self.original:dtype())
        set_original(self, "original", value)
        return
      end
      if type(value) ~= "table" or is_tensor(value) or #value ~= self.ntensors then
        fail(string.format("%s: right_inverse must give %d tensors, got %s", self.where, self.ntensors,
          type(value) == "table" and not is_tensor(value) and #value or describe(value)))
      end
      for i = 1, self.ntensors do
        local key = "original" .. (i - 1)
        check_value(self, value[i], i - 1, self[key]:dtype())
        set_original(self, key, value[i])
      end
    end)
  end

  -- Raises unless x has y's dtype and shape: what a parametrization must keep
  -- unless registered with unsafe = true.
  local function check_same(where, what, x, y)
    if not is_tensor(x) then fail(string.format("%s: %s must give a tensor, got %s", where, what, describe(x))) end
    if x:dtype() ~= y:dtype() then
      fail(string.format("%s: %s gives %s, but the tensor is %s (pass {unsafe = true} to allow it)", where, what,
        x:dtype(), y:dtype()))
    end
    if shape_str(x) ~= shape_str(y) then
      fail(string.format("%s: %s gives shape %s, but the tensor has shape %s (pass {unsafe = true} to allow it)",
        where, what, shape_str(x), shape_str(y)))
    end
  end

  -- Registers t as original `key` of plist: a parameter (requiring grad as
  -- the tensor it replaces did) or a buffer, as that tensor was.
  local function add_original(plist, key, t, is_param, requires_grad)
    if is_param then
      plist:register_parameter(key, t:requires_grad_(requires_grad))
    else
      plist:register_buffer(key, t)
    end
  end

  -- The originals of a new list: right_inverse of `original` (or the tensor
  -- itself when there is none). A single one is `original` itself, given the
  -- new value (as PyTorch's set_), once the consistency check has passed.
  local function init_originals(plist, original, is_param, unsafe)
    local where = "register_parametrization: " .. plist.where
    local rg = original.requires_grad
    local new = no_grad(function()
      local p = plist[1]
      if p.right_inverse == nil then return original end
      return one_or_list(p:right_inverse(original))
    end)
    if is_tensor(new) then
      if new:dtype() ~= original:dtype() then
        fail(string.format("%s: right_inverse gives %s, but the tensor is %s", where, new:dtype(), original:dtype()))
      end
      plist.is_tensor, plist.ntensors = true, 1
      add_original(plist, "original", addr(new) == addr(original) and original or new:detach(), is_param, rg)
    elseif type(new) == "table" and #new > 0 then
      plist.is_tensor, plist.ntensors = false, #new
      for i, t in ipairs(new) do
        if not is_tensor(t) then
          fail(string.format("%s: right_inverse must give tensors, got %s at %d", where, describe(t), i))
        end
        add_original(plist, "original" .. (i - 1), t:detach(), is_param, rg)
      end
    else
      fail(string.format("%s: right_inverse must give a tensor or a list of tensors, got %s", where, describe(new)))
    end
    if not unsafe then check_same(where, "parametrization " .. plist[1]:class_name(), plist(), original) end
    if plist.is_tensor and addr(plist.original) ~= addr(original) and shape_str(new) == shape_str(original) then
      no_grad(function() original:copy_(new) end)
      add_original(plist, "original", original, is_param, rg)
    end
  end

  -- -- the metatable of parametrized modules ------------------------------------------------------

  -- The list of parametrizations of field k of module self, or nil.
  local function plist_of(self, k)
    if type(k) ~= "string" then return nil end
    local d = self._modules.parametrizations
    return d and d._modules[k]
  end

  -- A module's instance metatable -> its parametrized copy, whose field reads
  -- and writes look at the parametrizations first (PyTorch's injected class).
  local parametrized_mts = setmetatable({}, { __mode = "k" })
  local function parametrized_mt(base)
    local mt = parametrized_mts[base]
    if mt then return mt end
    mt = {}
    for k, v in pairs(base) do mt[k] = v end
    local base_index, base_newindex = base.__index, base.__newindex
    mt.__tide_parametrized_base = base
    mt.__index = function(self, k)
      local plist = plist_of(self, k)
      if plist ~= nil then return evaluate(self, k, plist) end
      if type(base_index) == "function" then return base_index(self, k) end
      return base_index[k]
    end
    mt.__newindex = function(self, k, v)
      local plist = plist_of(self, k)
      if plist == nil then return base_newindex(self, k, v) end
      if v == nil then
        fail(string.format("%s: '%s' is parametrized; remove it with nn.utils.parametrize.remove_parametrizations",
          self:class_name(), k))
      end
      plist:right_inverse(v)
    end
    parametrized_mts[base] = mt
    return mt
  end

  -- -- the API ------------------------------------------------------------------------------------

  local function need_module(m, fname, i)
    if not is_module(m) then fail(string.format("%s: argument %d must be a module, got %s", fname, i, describe(m))) end
  end
  local function need_name(name, fname)
    if type(name) ~= "string" or name == "" then
      fail(string.format("%s: the tensor name must be a non-empty string, got %s", fname, tostring(name)))
    end
  end

  --- parametrize.is_parametrized(module, name): whether module has a
  -- parametrization on tensor `name` (nil: on any tensor).
  -- @return a boolean
  -- @usage if P.is_parametrized(m, "weight") then ... end
  function P.is_parametrized(module, name)
    if not is_module(module) or rawget(getmetatable(module), "__tide_parametrized_base") == nil then return false end
    local d = module._modules.parametrizations
    if d == nil then return false end
    if name == nil then return #d._module_order > 0 end
    return d._modules[name] ~= nil
  end

  --- parametrize.register_parametrization(module, name, parametrization, {unsafe = false}):
  -- from now on module[name] is parametrization(original), computed on each
  -- read, where original (module.parametrizations[name].original) is the
  -- tensor module[name] was: the same parameter object, holding
  -- parametrization:right_inverse(value) if the parametrization has one.
  -- A right_inverse that gives several tensors makes original0, original1, ...
  -- (new parameters: create the optimizer after registering), which the
  -- forward then takes as its arguments. Registering on a parametrized tensor
  -- chains: the new parametrization applies to the previous result. Assigning
  -- module[name] = value runs right_inverse. Unless unsafe, the
  -- parametrization must keep the tensor's shape and dtype.
  -- @param module the module owning parameter or buffer `name`
  -- @param name the tensor's name ("weight")
  -- @param parametrization a module whose forward maps the original(s) to the tensor
  -- @param opts {unsafe = false}
  -- @return module
  -- @usage P.register_parametrization(lin, "weight", Symmetric())
  function P.register_parametrization(module, name, parametrization, opts)
    local fname = "register_parametrization"
    need_module(module, fname, 1)
    need_name(name, fname)
    need_module(parametrization, fname, 3)
    opts = opts or {}
    if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", fname, type(opts))) end
    for k in pairs(opts) do
      if k ~= "unsafe" then fail(string.format("%s: unknown option '%s' (options: unsafe)", fname, tostring(k))) end
    end
    local unsafe = opts.unsafe == true
    local where = module:class_name() .. "." .. name
    local ctx = fname .. ": " .. where
    parametrization:train(module.training)
    if P.is_parametrized(module, name) then
      local plist = module._modules.parametrizations._modules[name]
      if not unsafe then
        local Y = module[name]
        local X = parametrization(Y)
        check_same(ctx, "parametrization " .. parametrization:class_name(), X, Y)
        if parametrization.right_inverse ~= nil then
          local Z = no_grad(function() return one_or_list(parametrization:right_inverse(X)) end)
          check_same(ctx, "the right_inverse of " .. parametrization:class_name(), Z, Y)
        end
      end
      plist:append(parametrization)
      plist.unsafe = plist.unsafe or unsafe
      return module
    end
    local is_param = module._parameters[name] ~= nil
    if not is_param and module._buffers[name] == nil then
      fail(string.format("%s: %s has no parameter or buffer '%s'", fname, module:class_name(), name))
    end
    local original = module[name]
    local plist = PList({ parametrization })
    plist.where, plist.unsafe = where, unsafe
    init_originals(plist, original, is_param, unsafe)
    module[name] = nil
    if not P.is_parametrized(module) then
      if module._modules.parametrizations ~= nil or module._attrs.parametrizations ~= nil then
        fail(string.format("%s: %s already has a field 'parametrizations'", fname, module:class_name()))
      end
      local mt = getmetatable(module)
      if rawget(mt, "__tide_parametrized_base") == nil then setmetatable(module, parametrized_mt(mt)) end
      module.parametrizations = nn.ModuleDict()
    end
    module.parametrizations:set(name, plist)
    return module
  end

  --- parametrize.remove_parametrizations(module, name, leave_parametrized = true):
  -- takes every parametrization off tensor `name`, which becomes a plain
  -- parameter (or buffer) again: the original tensor object, holding the
  -- current parametrized value (leave_parametrized) or its original value.
  -- A tensor parametrized by several originals (weight_norm) becomes a new
  -- parameter with the current value.
  -- @param leave_parametrized whether to keep the parametrized value (default true)
  -- @return module
  -- @usage P.remove_parametrizations(lin, "weight")
  function P.remove_parametrizations(module, name, leave_parametrized)
    local fname = "remove_parametrizations"
    need_module(module, fname, 1)
    need_name(name, fname)
    if leave_parametrized ~= nil and type(leave_parametrized) ~= "boolean" then
      fail(string.format("%s: leave_parametrized must be a boolean, got %s", fname, type(leave_parametrized)))
    end
    if not P.is_parametrized(module, name) then
      fail(string.format("%s: %s has no parametrization on '%s'", fname, module:class_name(), name))
    end
    local d = module._modules.parametrizations
    local plist = d._modules[name]
    local original, is_param
    if plist.is_tensor then
      original, is_param = plist.original, plist._parameters.original ~= nil
      if leave_parametrized ~= false then
        no_grad(function()
          local t = plist()
          if shape_str(t) == shape_str(original) then
            original:copy_(t)
          else
            original = t:detach():clone()
            if is_param then original:requires_grad_() end
          end
        end)
      end
    else
      if leave_parametrized == false then
        fail(string.format("%s: %s is parametrized by %d tensors, so it cannot go back to an original " ..
          "(leave_parametrized = false)", fname, plist.where, plist.ntensors))
      end
      local t = plist()
      is_param = t.requires_grad
      original = t:detach()
      if is_param then original:requires_grad_() end
    end
    d:pop(name)
    if #d._module_order == 0 then
      module.parametrizations = nil
      setmetatable(module, getmetatable(module).__tide_parametrized_base)
    end
    if is_param then module:register_parameter(name, original) else module:register_buffer(name, original) end
    return module
  end

  --- parametrize.cached(fn, ...): calls fn(...) with parametrized tensors
  -- computed once per module and name (the first read) rather than on every
  -- read, as PyTorch's `with parametrize.cached():`; for a forward that reads
  -- a weight several times (an RNN's loop). Returns fn's results.
  -- @usage local y = P.cached(function() return rnn(x) end)
  function P.cached(fn, ...)
    if type(fn) ~= "function" then fail("cached: argument 1 must be a function, got " .. type(fn)) end
    if cache_depth == 0 then cache = setmetatable({}, { __mode = "k" }) end
    cache_depth = cache_depth + 1
    local r = pack(pcall(fn, ...))
    cache_depth = cache_depth - 1
    if cache_depth == 0 then cache = nil end
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end
