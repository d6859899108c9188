--- tide.nn.Module: the base class of every layer, and the class mechanism that
-- defines new ones in Lua, as subclasses of torch.nn.Module do in PyTorch.
-- A module owns parameters (leaf tensors that require grad), buffers (state
-- that is saved but not trained, such as BatchNorm's running statistics) and
-- child modules; it walks them for parameters(), state_dict(), to(), train()
-- and printing. The layers themselves live in tide.nn (init.lua).
--
-- Defining a module:
--
--     local Net = nn.Module:extend("Net")
--     function Net:init(n_in, n_out)
--       self.fc = nn.Linear(n_in, n_out)                -- a module: registered as child "fc"
--       self.scale = tide.ones(n_out):requires_grad_()  -- a leaf requiring grad: parameter "scale"
--       self:register_buffer("count", tide.zeros({}))   -- a buffer, saved in state_dict
--       self.n_out = n_out                              -- anything else: a plain field
--     end
--     function Net:forward(x) return self.fc(x) * self.scale end
--     local net = Net(3, 2)            -- calls Net:init(3, 2); net(x) calls Net:forward(x)
--
-- Every assignment to a field goes through the instance's __newindex (plain
-- fields are kept in a side table), so a field that first held a number can
-- later hold a module and is registered then, as Python's __setattr__ does.
-- One instance per Lua state, like tide.nn itself (busted resets package.loaded between files).
do local nn = debug.getregistry()["tide.nn"]; if nn then return nn.Module end end
local B = require "bindings.ffi"
local T = require "tide.tensor"
local autograd = require "tide.autograd"
local ffi = B.ffi
local fail = B.fail
local is_tensor = T.is_tensor
local no_grad = autograd.no_grad

local Module = {}

-- -- helpers ---------------------------------------------------------------------------

-- The address of a tensor's C object: the identity used to deduplicate
-- parameters shared between modules (two cdata may refer to the same tensor).
local tensor_ptr = ffi.typeof("struct tide_tensor *")
local function addr(t) return tonumber(ffi.cast("intptr_t", ffi.cast(tensor_ptr, t))) end

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

local function is_module(x)
  if type(x) ~= "table" then return false end
  local mt = getmetatable(x)
  return type(mt) == "table" and rawget(mt, "__tide_module") == true
end
Module.is_module = is_module

-- A short description of a value for error messages.
local function kind(v)
  if is_tensor(v) then return "tensor" end
  if is_module(v) then return "module " .. v:class_name() end
  return type(v)
end

-- Ordered maps: a name -> value table and a list of names in insertion order.
local function od_set(map, order, k, v)
  if map[k] == nil then order[#order + 1] = k end
  map[k] = v
end
local function od_del(map, order, k)
  if map[k] == nil then return end
  map[k] = nil
  for i = 1, #order do
    if order[i] == k then table.remove(order, i); return end
  end
end

-- Removes name k from every store of module m.
local function forget(m, k)
  od_del(m._parameters, m._param_order, k)
  od_del(m._buffers, m._buffer_order, k)
  od_del(m._modules, m._module_order, k)
  m._non_persistent[k] = nil
  m._attrs[k] = nil
end

local function check_name(m, name, what)
  if type(name) ~= "string" or name == "" then
    fail(string.format("%s: %s name must be a non-empty string, got %s", m:class_name(), what, tostring(name)))
  end
  if name:find(".", 1, true) then
    fail(string.format("%s: %s name '%s' must not contain '.'", m:class_name(), what, name))
  end
end

-- -- classes ------------------------------------------------------------------------------

-- The metatable of a class's instances: field reads look in the plain fields,
-- then parameters, buffers and children, then the class (methods); every write
-- goes through __newindex, which registers tensors and modules.
-- -- forward hooks -----------------------------------------------------------------------

local function pack(...) return { n = select("#", ...), ... } end

-- m(...) with hooks: each pre-hook may replace the arguments, each hook the results
-- (a first result other than nil replaces them all).
local function call_hooked(self, pre, post, ...)
  local args = pack(...)
  for _, h in ipairs(pre or {}) do
    local r = pack(h.fn(self, unpack(args, 1, args.n)))
    if r.n > 0 and r[1] ~= nil then args = r end
  end
  local out = pack(self:forward(unpack(args, 1, args.n)))
  for _, h in ipairs(post or {}) do
    local r = pack(h.fn(self, args, unpack(out, 1, out.n)))
    if r.n > 0 and r[1] ~= nil then out = r end
  end
  return unpack(out, 1, out.n)
end

local HookHandle = {}
HookHandle.__index = HookHandle
--- handle:remove(): takes the hook off its module.
function HookHandle:remove()
  local list = rawget(self.module, self.field)
  if not list then return end
  for i, h in ipairs(list) do
    if h == self.entry then table.remove(list, i) break end
  end
  if #list == 0 then rawset(self.module, self.field, nil) end
end

local function add_hook(self, field, fn, api)
  if type(fn) ~= "function" then fail(string.format("%s: argument 1 must be a function, got %s", api, type(fn))) end
  local list = rawget(self, field)
  if not list then list = {}; rawset(self, field, list) end
  local entry = { fn = fn }
  list[#list + 1] = entry
  return setmetatable({ module = self, field = field, entry = entry }, HookHandle)
end

local function instance_mt(cls)
  local mt = { __tide_module = true }
  mt.__index = function(self, k)
    local v = self._attrs[k]
    if v ~= nil then return v end
    v = self._parameters[k]
    if v ~= nil then return v end
    v = self._buffers[k]
    if v ~= nil then return v end
    v = self._modules[k]
    if v ~= nil then return v end
    if type(k) == "number" and k < 0 and cls._is_list then
      return rawget(self, #self + k + 1)
    end
    return cls[k]
  end
  mt.__newindex = function(self, k, v)
    if type(k) == "number" then
      if not cls._is_list then
        fail(string.format("%s: numeric fields are for module lists (Sequential, ModuleList); got [%s]",
          cls.__name, tostring(k)))
      end
      if k ~= #self + 1 then
        fail(string.format("%s: index %s is out of range: a list of %d modules grows at index %d",
          cls.__name, tostring(k), #self, #self + 1))
      end
      if not is_module(v) then
        fail(string.format("%s: element %d must be a module, got %s", cls.__name, k, kind(v)))
      end
      rawset(self, k, v)
      return
    end
    if type(k) ~= "string" then fail(string.format("%s: field names must be strings, got %s", cls.__name, type(k))) end
    if is_module(v) then
      if v == self then fail(string.format("%s: a module cannot be its own child ('%s')", cls.__name, k)) end
      if self._modules[k] == nil then forget(self, k) end   -- a replaced child keeps its place, as in PyTorch
      od_set(self._modules, self._module_order, k, v)
    elseif self._parameters[k] ~= nil then
      if v == nil then forget(self, k) else self:register_parameter(k, v) end
    elseif self._buffers[k] ~= nil then
      if v == nil then forget(self, k) else self:register_buffer(k, v, not self._non_persistent[k]) end
    elseif self._modules[k] ~= nil then
      if v ~= nil then
        fail(string.format("%s: cannot assign a %s to child module '%s' (a module or nil expected)",
          cls.__name, kind(v), k))
      end
      forget(self, k)
    elseif is_tensor(v) and v.requires_grad and v.is_leaf then
      self:register_parameter(k, v)
    else
      self._attrs[k] = v
    end
  end
  mt.__call = function(self, ...)
    local pre, post = rawget(self, "_forward_pre_hooks"), rawget(self, "_forward_hooks")
    if pre == nil and post == nil then return self:forward(...) end
    return call_hooked(self, pre, post, ...)
  end
  mt.__tostring = function(self) return self:repr() end
  return mt
end

local function construct(cls, ...)
  local self = {
    _parameters = {}, _param_order = {},
    _buffers = {}, _buffer_order = {}, _non_persistent = {},
    _modules = {}, _module_order = {},
    _attrs = { training = true },
  }
  setmetatable(self, cls.__instance_mt)
  self:init(...)
  return self
end

local function setup_class(cls, name, parent)
  cls.__name = name
  cls.super = parent
  cls.__instance_mt = instance_mt(cls)
  return setmetatable(cls, {
    __index = parent,
    __call = construct,
    __tostring = function() return "class " .. name end,
  })
end
setup_class(Module, "Module", nil)

--- Module:extend(name): a new module class deriving from this one. Define its
-- `init(self, ...)` (the constructor; the instance's stores exist already, no
-- base call is needed) and `forward(self, ...)`; `Class(...)` makes an instance,
-- `instance(...)` calls forward. Inside a derived init, `Parent.init(self, ...)`
-- runs the parent's constructor; `Class.super` is the parent class.
-- @param name the class name, used by printing and error messages
-- @return the class table (add methods to it)
-- @usage local Net = nn.Module:extend("Net")
-- function Net:init() self.fc = nn.Linear(2, 1) end
-- function Net:forward(x) return self.fc(x):sigmoid() end
function Module:extend(name)
  if type(name) ~= "string" or name == "" then fail("extend: the class name must be a non-empty string") end
  if rawget(self, "__instance_mt") == nil then fail("extend: call it on a class (nn.Module:extend), not an instance") end
  return setup_class({}, name, self)
end

--- m:register_forward_pre_hook(fn): fn(m, ...) runs before each m(...) with its
-- arguments and may return new ones (nil keeps them). Returns a handle with remove().
-- @usage m:register_forward_pre_hook(function(m, x) return x:clamp(-1, 1) end)
function Module:register_forward_pre_hook(fn)
  return add_hook(self, "_forward_pre_hooks", fn, "register_forward_pre_hook")
end

--- m:register_forward_hook(fn): fn(m, args, ...) runs after each m(...), with the
-- arguments (a table with n) and the results, and may return new results (nil
-- keeps them). Returns a handle with remove().
-- @usage local acts = {}; m:register_forward_hook(function(m, args, y) acts[#acts + 1] = y end)
function Module:register_forward_hook(fn)
  return add_hook(self, "_forward_hooks", fn, "register_forward_hook")
end

--- The constructor, called by Class(...). The base one does nothing.
-- @usage function Net:init(n) self.fc = nn.Linear(n, n) end
function Module:init() end

--- The computation of the module; every class defines its own. m(...) calls it.
-- @usage function Net:forward(x) return self.fc(x):relu() end
function Module:forward()
  fail(string.format("%s: forward is not defined; define %s:forward(...)", self:class_name(), self:class_name()))
end

--- The name of the module's class ("Linear").
-- @return a string
-- @usage if m:class_name() == "Linear" then ... end
function Module:class_name() return self.__name end

-- -- registration ----------------------------------------------------------------------

--- Registers tensor t as parameter `name` (t must be a leaf; a floating-point
-- one is made to require grad, as wrapping in nn.Parameter does). Assigning a
-- leaf that requires grad to a field does the same. nil removes the parameter.
-- @param name the parameter's name (no dots)
-- @param t a leaf tensor, or nil
-- @return t
-- @usage self:register_parameter("weight", tide.empty(4, 3))
function Module:register_parameter(name, t)
  check_name(self, name, "parameter")
  if t == nil then forget(self, name); return nil end
  if not is_tensor(t) then
    fail(string.format("%s: parameter '%s' must be a tensor, got %s", self:class_name(), name, kind(t)))
  end
  if not t.is_leaf then
    fail(string.format("%s: parameter '%s' must be a leaf tensor, got the result of '%s' (use detach())",
      self:class_name(), name, t.grad_fn))
  end
  if not t.requires_grad and t:is_floating_point() then t:requires_grad_() end
  if self._parameters[name] == nil then forget(self, name) end
  od_set(self._parameters, self._param_order, name, t)
  return t
end

--- Registers tensor t as buffer `name`: state that state_dict() saves and to()
-- moves, but that is not a parameter (running statistics). With persistent =
-- false it is left out of state_dict(). nil removes the buffer.
-- @param name the buffer's name (no dots)
-- @param t a tensor, or nil
-- @param persistent whether state_dict() includes it (default true)
-- @return t
-- @usage self:register_buffer("running_mean", tide.zeros(n))
function Module:register_buffer(name, t, persistent)
  check_name(self, name, "buffer")
  if t == nil then forget(self, name); return nil end
  if not is_tensor(t) then
    fail(string.format("%s: buffer '%s' must be a tensor, got %s", self:class_name(), name, kind(t)))
  end
  if self._buffers[name] == nil then forget(self, name) end
  od_set(self._buffers, self._buffer_order, name, t)
  self._non_persistent[name] = persistent == false or nil
  return t
end

--- Registers module m as child `name` (as assigning it to a field does).
-- @param name the child's name (no dots)
-- @param m a module, or nil to remove it
-- @return m
-- @usage self:add_module("fc", nn.Linear(2, 3))
function Module:add_module(name, m)
  check_name(self, name, "module")
  if m ~= nil and not is_module(m) then
    fail(string.format("%s: child '%s' must be a module, got %s", self:class_name(), name, kind(m)))
  end
  self[name] = m
  return m
end
Module.register_module = Module.add_module

-- -- walking the tree ----------------------------------------------------------------

-- An iterator over a list of {name, value} pairs: for name, v in iter(list) do.
local function iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

-- The {name, module} pairs of the direct children: the list part of the
-- module (Sequential, ModuleList; named "0", "1", ... as in PyTorch) first,
-- then the named children in registration order.
local function child_pairs(self)
  local r = {}
  for i = 1, #self do
    local c = rawget(self, i)
    if not is_module(c) then
      fail(string.format("%s: element %d is a %s, not a module", self:class_name(), i, kind(c)))
    end
    r[#r + 1] = { tostring(i - 1), c }
  end
  for _, name in ipairs(self._module_order) do r[#r + 1] = { name, self._modules[name] } end
  return r
end

--- An iterator over (name, child) for the direct children, each once.
-- @usage for name, child in model:named_children() do print(name, child) end
function Module:named_children()
  local r, seen = {}, {}
  for _, e in ipairs(child_pairs(self)) do
    if not seen[e[2]] then seen[e[2]] = true; r[#r + 1] = e end
  end
  return iter(r)
end

--- The direct children, as a list, each once.
-- @return a list of modules
-- @usage for _, c in ipairs(model:children()) do print(c) end
function Module:children()
  local r = {}
  for _, c in self:named_children() do r[#r + 1] = c end
  return r
end

-- {name, module} for self and every descendant, pre-order, each module once.
local function module_pairs(self, prefix, out, seen)
  if seen[self] then return out end
  seen[self] = true
  out[#out + 1] = { prefix, self }
  for _, e in ipairs(child_pairs(self)) do
    module_pairs(e[2], prefix == "" and e[1] or prefix .. "." .. e[1], out, seen)
  end
  return out
end

--- An iterator over (name, module) for this module ("") and all its
-- descendants, pre-order, each module once.
-- @usage for name, m in model:named_modules() do print(name, m:class_name()) end
function Module:named_modules() return iter(module_pairs(self, "", {}, {})) end

--- This module and all its descendants, as a list (pre-order), each once.
-- @return a list of modules
-- @usage for _, m in ipairs(model:modules()) do m.eps = 1e-3 end
function Module:modules()
  local r = {}
  for _, e in ipairs(module_pairs(self, "", {}, {})) do r[#r + 1] = e[2] end
  return r
end

-- {qualified name, tensor} for the tensors of one store ("_parameters" or
-- "_buffers") of self and (when recurse) its descendants, each tensor once.
local function tensor_pairs(self, store, recurse)
  local order_key = store == "_parameters" and "_param_order" or "_buffer_order"
  local out, seen = {}, {}
  local mods = recurse == false and { { "", self } } or module_pairs(self, "", {}, {})
  for _, e in ipairs(mods) do
    local prefix, m = e[1], e[2]
    for _, name in ipairs(m[order_key]) do
      local t = m[store][name]
      local a = addr(t)
      if not seen[a] then
        seen[a] = true
        out[#out + 1] = { prefix == "" and name or prefix .. "." .. name, t }
      end
    end
  end
  return out
end

--- An iterator over (name, parameter), names qualified as in PyTorch
-- ("fc1.weight", "0.bias"); a parameter shared by several modules comes once.
-- @param recurse false for this module's own parameters only (default true)
-- @usage for name, p in model:named_parameters() do print(name, p:shape()) end
function Module:named_parameters(recurse) return iter(tensor_pairs(self, "_parameters", recurse)) end

--- The parameters as a list, in registration order, each once.
-- @param recurse false for this module's own parameters only (default true)
-- @return a list of tensors
-- @usage local n = #model:parameters()
function Module:parameters(recurse)
  local r = {}
  for _, e in ipairs(tensor_pairs(self, "_parameters", recurse)) do r[#r + 1] = e[2] end
  return r
end

--- An iterator over (name, buffer), as named_parameters.
-- @param recurse false for this module's own buffers only (default true)
-- @usage for name, b in bn:named_buffers() do print(name, b) end
function Module:named_buffers(recurse) return iter(tensor_pairs(self, "_buffers", recurse)) end

--- The buffers as a list, in registration order, each once.
-- @param recurse false for this module's own buffers only (default true)
-- @return a list of tensors
-- @usage local stats = bn:buffers()
function Module:buffers(recurse)
  local r = {}
  for _, e in ipairs(tensor_pairs(self, "_buffers", recurse)) do r[#r + 1] = e[2] end
  return r
end

--- Calls fn(m) on every descendant, then on this module (PyTorch's order).
-- @return self
-- @usage model:apply(function(m) if m:class_name() == "Linear" then nn.init.zeros_(m.bias) end end)
function Module:apply(fn)
  if type(fn) ~= "function" then fail("apply: argument 1 must be a function") end
  for _, c in ipairs(self:children()) do c:apply(fn) end
  fn(self)
  return self
end

-- -- modes and gradients ------------------------------------------------------------------

--- Sets training mode (true by default) on this module and every descendant:
-- Dropout drops and BatchNorm uses batch statistics in training mode.
-- @return self
-- @usage model:train()
function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then fail("train: mode must be a boolean, got " .. type(mode)) end
  for _, m in ipairs(self:modules()) do m._attrs.training = mode end
  return self
end

--- Evaluation mode: train(false).
-- @return self
-- @usage model:eval(); local y = model(x)
function Module:eval() return self:train(false) end

--- Clears the gradient of every parameter (sets it to nil, as PyTorch's
-- zero_grad(set_to_none=True)).
-- @return self
-- @usage model:zero_grad(); loss:backward()
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do
    if p.grad ~= nil then p.grad = nil end
  end
  return self
end

-- -- state -------------------------------------------------------------------------------

-- {name, tensor} of everything state_dict() holds, in order, without
-- deduplication: a tied weight or a shared child is saved under each of its
-- names, as PyTorch does. `path` holds the modules being walked, to refuse cycles.
local function state_pairs(self, prefix, out, path)
  if path[self] then
    fail(string.format("state_dict: the module tree has a cycle at '%s'", prefix:sub(1, -2)))
  end
  path[self] = true
  for _, name in ipairs(self._param_order) do out[#out + 1] = { prefix .. name, self._parameters[name] } end
  for _, name in ipairs(self._buffer_order) do
    if not self._non_persistent[name] then out[#out + 1] = { prefix .. name, self._buffers[name] } end
  end
  for _, e in ipairs(child_pairs(self)) do state_pairs(e[2], prefix .. e[1] .. ".", out, path) end
  path[self] = nil
  return out
end

--- The module's state: a flat table from qualified names ("0.weight",
-- "bn.running_mean") to tensors, parameters and persistent buffers alike. The
-- tensors are detached but share memory with the module's.
-- @return a table name -> tensor
-- @usage local sd = model:state_dict(); other:load_state_dict(sd)
function Module:state_dict()
  local r = {}
  for _, e in ipairs(state_pairs(self, "", {}, {})) do r[e[1]] = e[2]:detach() end
  return r
end

--- The names state_dict() uses, in order.
-- @return a list of strings
-- @usage for _, k in ipairs(model:state_dict_keys()) do print(k) end
function Module:state_dict_keys()
  local r = {}
  for _, e in ipairs(state_pairs(self, "", {}, {})) do r[#r + 1] = e[1] end
  return r
end

local function quote_list(list)
  local r = {}
  for i, k in ipairs(list) do r[i] = '"' .. k .. '"' end
  return table.concat(r, ", ")
end

--- Copies the tensors of sd (a table name -> tensor, such as state_dict()
-- returns) into the module's parameters and buffers, in place and without
-- recording gradients; values are converted to each tensor's dtype. With
-- strict (the default) the keys must match exactly; a shape mismatch is an
-- error in any case. Nothing is copied when an error is raised.
-- @param sd the state to load
-- @param opts {strict = true}
-- @return {missing_keys = {...}, unexpected_keys = {...}}
-- @usage model:load_state_dict(sd, { strict = false })
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" then fail("load_state_dict: argument 1 must be a table name -> tensor, got " .. type(sd)) end
  opts = opts or {}
  local strict = opts.strict ~= false
  local own = state_pairs(self, "", {}, {})
  local known, missing, unexpected = {}, {}, {}
  for _, e in ipairs(own) do
    local name, t = e[1], e[2]
    known[name] = true
    local v = sd[name]
    if v == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(v) then
      fail(string.format('load_state_dict: the value of "%s" must be a tensor, got %s', name, kind(v)))
    elseif shape_str(v) ~= shape_str(t) then
      fail(string.format('load_state_dict: size mismatch for "%s": the state dict has shape %s, the module %s',
        name, shape_str(v), shape_str(t)))
    end
  end
  for k in pairs(sd) do
    if not known[k] then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(unexpected)
  if strict and (#missing > 0 or #unexpected > 0) then
    local parts = {}
    if #missing > 0 then parts[#parts + 1] = "missing keys " .. quote_list(missing) end
    if #unexpected > 0 then parts[#parts + 1] = "unexpected keys " .. quote_list(unexpected) end
    fail(string.format("load_state_dict: %s: %s (pass {strict = false} to load the rest)",
      self:class_name(), table.concat(parts, "; ")))
  end
  no_grad(function()
    for _, e in ipairs(own) do
      local v = sd[e[1]]
      if v ~= nil then e[2]:copy_(v) end
    end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- -- conversion -----------------------------------------------------------------------------

-- Splits to()'s arguments into a dtype name and a device name (either may be nil).
-- A last table of options may say non_blocking, as Tensor:to takes it.
local function to_args(...)
  local dtype, device
  local n = select("#", ...)
  local last = n > 0 and select(n, ...) or nil
  if type(last) == "table" and not T.is_tensor(last) then
    for k, v in pairs(last) do
      if k ~= "non_blocking" then fail(("to: unknown option '%s' (options: non_blocking)"):format(tostring(k))) end
      if type(v) ~= "boolean" then fail("to: option 'non_blocking' must be a boolean, got " .. type(v)) end
    end
    n = n - 1
  end
  for i = 1, n do
    local x = select(i, ...)
    if type(x) ~= "string" then fail("to: expects dtype or device names, got " .. type(x)) end
    if pcall(T.dtype_id, x) then
      dtype = x
    else
      local ok, err = pcall(function() return require("tide").empty(0, { device = x }) end)
      if not ok and (x:match("^cuda") or x:match("^cpu")) then
        fail("to: " .. tostring(err):gsub("^.-:%d+: ", "", 1))   -- a device, but not one here: say why
      end
      if not ok then fail(string.format("to: '%s' is neither a dtype nor a device", x)) end
      device = x
    end
  end
  return dtype, device
end

--- Converts the parameters and buffers of this module and its descendants to
-- a dtype (floating-point tensors only, as PyTorch does: integer buffers keep
-- theirs) and/or moves them to a device. The module's fields are replaced by
-- the new tensors; parameters stay leaves with their requires_grad, their
-- gradients are converted too, and tensors shared between modules stay shared.
-- @param ... a dtype name ("float64"), a device name ("cpu:1"), or both
-- @return self
-- @usage model:to("float64"); model:to("cpu:1")
function Module:to(...)
  local dtype, device = to_args(...)
  local memo = {}
  local function convert(t)
    local a = addr(t)
    if memo[a] then return memo[a] end
    local args = {}
    if dtype and t:is_floating_point() then args[#args + 1] = dtype end
    if device then args[#args + 1] = device end
    local r = t
    if #args > 0 then
      r = no_grad(function()
        local c = t:to(unpack(args))
        if c ~= t and t.requires_grad then
          c:requires_grad_()
          local g = t.grad
          if g ~= nil then c.grad = g:to(unpack(args)) end
        end
        return c
      end)
    end
    memo[a] = r
    return r
  end
  for _, m in ipairs(self:modules()) do
    for _, name in ipairs(m._param_order) do m._parameters[name] = convert(m._parameters[name]) end
    for _, name in ipairs(m._buffer_order) do m._buffers[name] = convert(m._buffers[name]) end
  end
  return self
end

--- to("float64").
-- @return self
-- @usage model:double()
function Module:double() return self:to("float64") end
--- to("float32").
-- @return self
-- @usage model:float()
function Module:float() return self:to("float32") end
--- to("float16").
-- @return self
-- @usage model:half()
function Module:half() return self:to("float16") end
--- to("bfloat16").
-- @return self
-- @usage model:bfloat16()
function Module:bfloat16() return self:to("bfloat16") end

-- -- copying -------------------------------------------------------------------------------

--- An independent deep copy of the module (PyTorch's copy.deepcopy(m)): its
-- own parameters and buffers, cloned (same dtype, device and requires_grad;
-- no gradients), its own children, copied alike, and copies of plain table
-- fields. Whatever is shared inside the module (a tied weight, a child used
-- twice) is shared the same way inside the copy.
-- @return the new module
-- @usage local layers = {}; for i = 1, 6 do layers[i] = layer:clone() end
function Module:clone()
  local memo = {}
  local function copy_tensor(t)
    local a = addr(t)
    if memo[a] == nil then
      memo[a] = no_grad(function()
        local c = t:detach():clone()
        if t.requires_grad then c:requires_grad_() end
        return c
      end)
    end
    return memo[a]
  end
  local function copy(v)
    if is_tensor(v) then return copy_tensor(v) end
    if type(v) ~= "table" then return v end
    if memo[v] ~= nil then return memo[v] end
    local mt = getmetatable(v)
    if not is_module(v) then
      if mt ~= nil then return v end   -- a class or an object of some other kind: shared, not copied
      local r = {}
      memo[v] = r
      for k, x in pairs(v) do r[copy(k)] = copy(x) end
      return r
    end
    local r = {
      _parameters = {}, _param_order = {},
      _buffers = {}, _buffer_order = {}, _non_persistent = {},
      _modules = {}, _module_order = {},
      _attrs = {},
    }
    memo[v] = r
    for _, store in ipairs { "_param_order", "_buffer_order", "_module_order" } do
      for i, name in ipairs(v[store]) do r[store][i] = name end
    end
    for name, t in pairs(v._parameters) do r._parameters[name] = copy_tensor(t) end
    for name, t in pairs(v._buffers) do r._buffers[name] = copy_tensor(t) end
    for name in pairs(v._non_persistent) do r._non_persistent[name] = true end
    for name, m in pairs(v._modules) do r._modules[name] = copy(m) end
    for k, x in pairs(v._attrs) do r._attrs[k] = copy(x) end
    for i = 1, #v do rawset(r, i, copy(rawget(v, i))) end
    return setmetatable(r, mt)
  end
  return copy(self)
end

-- -- printing -------------------------------------------------------------------------------

--- The text printed between the parentheses after the class name
-- ("in_features=2, out_features=8, bias=true"); classes override it.
-- @return a string
-- @usage function Net:extra_repr() return "n=" .. self.n end
function Module:extra_repr() return "" end

--- The module tree as text, as PyTorch prints it (tostring(m) gives the same).
-- @return a string
-- @usage print(model)
function Module:repr()
  local extra = self:extra_repr()
  local kids = child_pairs(self)
  if #kids == 0 then return self:class_name() .. "(" .. extra .. ")" end
  local lines = {}
  if extra ~= "" then lines[1] = "  " .. extra:gsub("\n", "\n  ") end
  for _, e in ipairs(kids) do
    lines[#lines + 1] = "  (" .. e[1] .. "): " .. e[2]:repr():gsub("\n", "\n  ")
  end
  return self:class_name() .. "(\n" .. table.concat(lines, "\n") .. "\n)"
end

return Module
