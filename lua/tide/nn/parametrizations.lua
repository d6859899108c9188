--- tide.nn.parametrizations: weight normalisation, spectral normalisation and
-- orthogonal weights, as torch.nn.utils.parametrizations (modules registered
-- through nn.utils.parametrize) and as PyTorch's older forward-pre-hook
-- functions nn.utils.weight_norm and nn.utils.spectral_norm. Dimensions are
-- 1-based (PyTorch's dim=0 is dim=1 here). Everything is tensor ops: nothing
-- is read back in a forward, except the number of squarings matrix_exp reads.
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.parametrizations")(nn)`.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local is_tensor = tide.is_tensor
local no_grad = tide.no_grad
local fmt = string.format

return function(nn)
  local Module, F = nn.Module, nn.functional
  local utils = nn.utils
  local P = utils.parametrize
  local PZ = utils.parametrizations or {}
  utils.parametrizations = PZ

  -- -- helpers ------------------------------------------------------------------------------------

  -- dim (1-based, negative from the end) of a d-dimensional tensor, checked.
  local function wrap_dim(dim, d, fname)
    if not args.is_int(dim) or dim == 0 or dim > d or dim < -d then
      fail(fmt("%s: dimension %s is out of range for a %d-d weight", fname, tostring(dim), d))
    end
    return dim > 0 and dim or d + dim + 1
  end

  -- module[name] as a tensor, or an error naming module and name.
  local function tensor_of(module, name, fname)
    if not nn.is_module(module) then fail(fmt("%s: argument 1 must be a module, got %s", fname, type(module))) end
    if type(name) ~= "string" then fail(fmt("%s: the tensor name must be a string, got %s", fname, type(name))) end
    local w = module[name]
    if not is_tensor(w) then
      fail(fmt("%s: %s has no parameter or buffer '%s'", fname, module:class_name(), name))
    end
    return w
  end

  -- The 2-norm of v over every dim but `dim` (keeping them as size 1), or of
  -- all of v when dim is false: PyTorch's norm_except_dim.
  local function norm_except_dim(v, dim)
    if not dim then return v:norm() end
    if v:dim() == 1 then return v:abs() end
    local dims = {}
    for d = 1, v:dim() do if d ~= dim then dims[#dims + 1] = d end end
    return v:norm(2, dims, true)
  end

  -- w as a matrix whose rows are indexed by dim: [size(dim), everything else].
  local function as_matrix(w, dim)
    if dim ~= 1 then
      local perm = { dim }
      for d = 1, w:dim() do if d ~= dim then perm[#perm + 1] = d end end
      w = w:permute(perm)
    end
    return w:reshape(w:size(1), -1)
  end

  local function unit(x, eps) return F.normalize(x, { dim = 1, eps = eps }) end

  local function is_conv_transpose(module)
    local c = module:class_name()
    return c == "ConvTranspose1d" or c == "ConvTranspose2d" or c == "ConvTranspose3d"
  end

  local function need_count(n, fname)
    if not args.is_int(n) or n <= 0 then
      fail(fmt("%s: n_power_iterations must be a positive integer, got %s", fname, tostring(n)))
    end
    return n
  end
  local function need_eps(eps, fname)
    if type(eps) ~= "number" or not (eps >= 0) then
      fail(fmt("%s: eps must be a non-negative number, got %s", fname, tostring(eps)))
    end
    return eps
  end

  -- -- weight_norm --------------------------------------------------------------------------------

  -- v * g / ||v|| (the norm taken over every dim but `dim`): PyTorch's _weight_norm.
  local function weight_norm_of(g, v, dim) return v * (g / norm_except_dim(v, dim)) end

  local WeightNorm = Module:extend("_WeightNorm")
  function WeightNorm:init(dim) self.dim = dim end
  function WeightNorm:forward(g, v) return weight_norm_of(g, v, self.dim) end
  function WeightNorm:right_inverse(w) return norm_except_dim(w, self.dim), w end
  function WeightNorm:extra_repr() return "dim=" .. tostring(self.dim) end
  PZ._WeightNorm = WeightNorm

  -- weight_norm's dim: 1-based, or false for the norm of the whole tensor (PyTorch's None).
  local function weight_norm_dim(dim, w, fname)
    if dim == false then return false end
    return wrap_dim(dim == nil and 1 or dim, w:dim(), fname)
  end

  --- nn.utils.parametrizations.weight_norm(module, name = "weight", dim = 1):
  -- module[name] becomes g * v / ||v||, the norm over every dim but dim (false:
  -- over all of v), from parametrizations[name].original0 (g, the norms, of
  -- size 1 but along dim) and original1 (v, the direction), which start at
  -- the weight's norms and the weight itself. g and v are new parameters:
  -- create the optimizer afterwards.
  -- @return module
  -- @usage local lin = nn.utils.parametrizations.weight_norm(nn.Linear(20, 40))
  function PZ.weight_norm(module, name, dim)
    name = name or "weight"
    local w = tensor_of(module, name, "weight_norm")
    P.register_parametrization(module, name, WeightNorm(weight_norm_dim(dim, w, "weight_norm")), { unsafe = true })
    return module
  end

  -- -- spectral_norm ------------------------------------------------------------------------------

  -- n steps of the power iteration on the matrix W, updating the unit vectors u
  -- and v in place towards its first left and right singular vectors.
  local function power_iteration(W, u, v, n, eps, v_first)
    no_grad(function()
      W = W:detach()
      for _ = 1, n do
        if v_first then v:copy_(unit(W:t():mv(u), eps)) end
        u:copy_(unit(W:mv(v), eps))
        if not v_first then v:copy_(unit(W:t():mv(u), eps)) end
      end
    end)
  end

  -- Two random unit vectors for the rows and the columns of W.
  local function random_uv(W, eps)
    local o = { dtype = W:dtype(), device = W:device() }
    return unit(tide.randn(W:size(1), o), eps), unit(tide.randn(W:size(2), o), eps)
  end

  local SpectralNorm = Module:extend("_SpectralNorm")
  function SpectralNorm:init(weight, n_power_iterations, dim, eps)
    self.dim, self.eps, self.n_power_iterations = dim, eps, n_power_iterations
    if weight:dim() > 1 then
      local W = as_matrix(weight, dim)
      local u, v = random_uv(W, eps)
      self:register_buffer("_u", u)
      self:register_buffer("_v", v)
      power_iteration(W, u, v, 15, eps)   -- a reasonable start, as PyTorch makes
    end
  end
  -- weight / sigma, sigma = u^T W v its largest singular value estimated by
  -- power iteration: one more step on each read in training mode.
  function SpectralNorm:forward(weight)
    if weight:dim() == 1 then return unit(weight, self.eps) end
    local W = as_matrix(weight, self.dim)
    if self.training then power_iteration(W, self._u, self._v, self.n_power_iterations, self.eps) end
    -- copies: the next step's in-place update must not reach this graph
    local u, v = self._u:clone(), self._v:clone()
    return weight / tide.vdot(u, W:mv(v))
  end
  function SpectralNorm:right_inverse(w) return w end
  function SpectralNorm:extra_repr()
    return fmt("dim=%d, n_power_iterations=%d, eps=%g", self.dim, self.n_power_iterations, self.eps)
  end
  PZ._SpectralNorm = SpectralNorm

  -- spectral_norm's dim: 1-based; by default 1, or 2 for the transposed convolutions.
  local function spectral_dim(module, dim, w, fname)
    if dim == nil then dim = is_conv_transpose(module) and 2 or 1 end
    return wrap_dim(dim, w:dim(), fname)
  end

  --- nn.utils.parametrizations.spectral_norm(module, name = "weight",
  -- n_power_iterations = 1, eps = 1e-12, dim): module[name] becomes W / sigma,
  -- sigma the largest singular value of W seen as a matrix with rows along
  -- dim (default 1; 2 for ConvTranspose), estimated by power iteration with
  -- the buffers parametrizations[name][0]._u and _v: n_power_iterations steps
  -- on each read in training mode, none in eval mode.
  -- @return module
  -- @usage local lin = nn.utils.parametrizations.spectral_norm(nn.Linear(20, 40))
  function PZ.spectral_norm(module, name, n_power_iterations, eps, dim)
    local fname = "spectral_norm"
    name = name or "weight"
    local w = tensor_of(module, name, fname)
    local sn = SpectralNorm(w, need_count(n_power_iterations or 1, fname), spectral_dim(module, dim, w, fname),
      need_eps(eps or 1e-12, fname))
    P.register_parametrization(module, name, sn)
    return module
  end

  -- -- orthogonal ---------------------------------------------------------------------------------

  local function eye_like(x, n, m) return tide.eye(n, m, { dtype = x:dtype(), device = x:device() }) end

  -- H_1 H_2 ... H_k times the first k columns of the identity, H_i = I - tau_i
  -- v_i v_i^T with v_i the i-th column of A below the diagonal and 1 on it:
  -- LAPACK's orgqr (torch.linalg.householder_product), for A [..., n, k].
  local function householder_product(A, tau)
    local n, k = A:size(-2), A:size(-1)
    local V = A:tril(-1) + eye_like(A, n, k)
    local Q = eye_like(A, n, k)
    for i = k, 1, -1 do
      local v = V:narrow(-1, i, 1)
      Q = Q - (v * tau:narrow(-1, i, 1):unsqueeze(-1)):matmul(v:mT():matmul(Q))
    end
    return Q
  end

  -- The Q of A = QR (A tall) with diag(R) >= 0.
  local function make_orthogonal(A)
    local Q, R = tide.linalg.qr(A)
    local s = R:diagonal(0, -2, -1):sign()
    return Q * tide.where(s:eq(0), 1, s):unsqueeze(-2)
  end

  local function is_orthogonal(Q)
    local n, k = Q:size(-2), Q:size(-1)
    local eps = 10 * n * (Q:dtype() == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07)
    return (Q:mT():matmul(Q) - eye_like(Q, k, k)):abs():max():item() <= eps
  end

  local MAPS = { matrix_exp = true, cayley = true, householder = true }

  local Orthogonal = Module:extend("_Orthogonal")
  function Orthogonal:init(weight, orthogonal_map, use_trivialization)
    self.shape, self.orthogonal_map, self.use_trivialization = weight:shape(), orthogonal_map, use_trivialization
  end
  -- An orthogonal matrix (orthonormal columns, or rows when wide) from X:
  -- exp or the Cayley transform of the skew-symmetric matrix from X's lower
  -- triangle, or the Householder reflectors under X's diagonal; times `base`
  -- (the trivialization: X = 0 gives base itself).
  function Orthogonal:forward(X)
    local n, k = X:size(-2), X:size(-1)
    local transposed = n < k
    if transposed then X, n, k = X:mT(), k, n end
    local Q
    if self.orthogonal_map == "householder" then
      local A = X:tril(-1)
      local tau = 2 / ((A * A):sum(-2) + 1)
      -- X's diagonal holds signs (+-1): constants, as PyTorch's int() cast makes them
      Q = householder_product(A, tau) * X:diagonal(0, -2, -1):detach():trunc():unsqueeze(-2)
    else
      X = X:tril()
      if n ~= k then   -- embedded in a square matrix
        local zshape = X:shape()
        zshape[#zshape] = n - k
        X = tide.cat({ X, tide.zeros(zshape, { dtype = X:dtype(), device = X:device() }) }, -1)
      end
      local A = X - X:mT()
      if self.orthogonal_map == "matrix_exp" then
        Q = tide.linalg.matrix_exp(A)
      else
        local I = eye_like(A, n, n)
        Q = tide.linalg.solve(I - A * 0.5, I + A * 0.5)
      end
      if n ~= k then Q = Q:narrow(-1, 1, k) end
    end
    if self.use_trivialization then Q = self.base:matmul(Q) end
    if transposed then Q = Q:mT() end
    return Q
  end
  -- With the trivialization: base becomes Q (completed to a square orthogonal
  -- matrix, or made orthogonal by QR) and the original the X that maps to
  -- the identity. Without it, only the Householder map could be inverted, and
  -- that needs LAPACK's geqrf, which tide lacks.
  function Orthogonal:right_inverse(Q)
    if table.concat(Q:shape(), ",") ~= table.concat(self.shape, ",") then
      fail(fmt("orthogonal: expected a matrix or batch of matrices of shape [%s], got shape [%s]",
        table.concat(self.shape, ","), table.concat(Q:shape(), ",")))
    end
    if not self.use_trivialization then
      if self.registering then return Q end   -- the original starts as the weight itself, as in PyTorch
      fail(fmt("orthogonal: cannot assign to the %s map with use_trivialization = false", self.orthogonal_map))
    end
    local Q_init = Q
    local n, k = Q:size(-2), Q:size(-1)
    if n < k then Q, n, k = Q:mT(), k, n end
    if n == k then
      Q = is_orthogonal(Q) and Q:clone() or make_orthogonal(Q)
    else
      local shape = Q:shape()
      shape[#shape] = n - k
      Q = make_orthogonal(tide.cat({ Q, tide.randn(shape, { dtype = Q:dtype(), device = Q:device() }) }, -1))
    end
    self:register_buffer("base", Q)
    -- -I: the householder map sends it to the identity too (its diagonal gives the signs)
    local neg_id = eye_like(Q_init, Q_init:size(-2), Q_init:size(-1)):neg()
    return neg_id:expand(Q_init:shape()):contiguous()
  end
  function Orthogonal:extra_repr() return "orthogonal_map=" .. self.orthogonal_map end
  PZ._Orthogonal = Orthogonal

  --- nn.utils.parametrizations.orthogonal(module, name = "weight",
  -- orthogonal_map, {use_trivialization = true}): module[name] (a matrix or a
  -- batch of them, [..., n, k]) becomes orthogonal, Q^T Q = I (Q Q^T = I when
  -- wide), by orthogonal_map: "matrix_exp" (default for square), "cayley" or
  -- "householder" (default otherwise) applied to the original. With the
  -- trivialization (PyTorch's default) the weight starts at its QR
  -- orthogonalisation, kept in the buffer `base`, and assigning
  -- module[name] = Q resets base to Q.
  -- @return module
  -- @usage local lin = nn.utils.parametrizations.orthogonal(nn.Linear(4, 4))
  function PZ.orthogonal(module, name, orthogonal_map, opts)
    local fname = "orthogonal"
    name = name or "weight"
    local w = tensor_of(module, name, fname)
    opts = args.options(opts, fname, { use_trivialization = true })
    if w:dim() < 2 then
      fail(fmt("%s: %s.%s must be a matrix or a batch of matrices, got a %d-d tensor", fname, module:class_name(),
        name, w:dim()))
    end
    if not w:is_floating_point() then fail(fmt("%s: %s.%s must be floating-point, got %s", fname,
      module:class_name(), name, w:dtype())) end
    orthogonal_map = orthogonal_map or (w:size(-1) == w:size(-2) and "matrix_exp" or "householder")
    if not MAPS[orthogonal_map] then
      fail(fmt("%s: orthogonal_map must be 'matrix_exp', 'cayley' or 'householder', got %s", fname,
        tostring(orthogonal_map)))
    end
    local trivial = opts.use_trivialization ~= false
    if not trivial and orthogonal_map == "householder" then
      fail(fmt("%s: the householder map needs use_trivialization = true here (its inverse needs LAPACK's geqrf, " ..
        "which tide lacks)", fname))
    end
    local orth = Orthogonal(w, orthogonal_map, trivial)
    orth.registering = true
    P.register_parametrization(module, name, orth, { unsafe = true })
    orth.registering = false
    return module
  end

  -- -- the forward-pre-hook functions -------------------------------------------------------------

  -- module -> { ["weight_norm:weight"] = hook handle, ... }: the hooks the
  -- remove_ functions take off.
  local hooks = setmetatable({}, { __mode = "k" })
  local function hook_of(module, key) return hooks[module] and hooks[module][key] end
  local function set_hook(module, key, h)
    hooks[module] = hooks[module] or {}
    hooks[module][key] = h
  end
  -- The hook `kind` of module's `name`, taken off the module; api names the caller in the error.
  local function take_hook(module, kind, name, api)
    local key = kind .. ":" .. name
    local h = nn.is_module(module) and hook_of(module, key)
    if not h then
      fail(fmt("%s: %s of '%s' not found in %s", api, kind, tostring(name),
        nn.is_module(module) and module:class_name() or type(module)))
    end
    h.handle:remove()
    hooks[module][key] = nil
    return h
  end

  local function own_parameter(module, name, fname)
    local w = tensor_of(module, name, fname)
    if module._parameters[name] == nil then
      fail(fmt("%s: '%s' of %s must be a parameter", fname, name, module:class_name()))
    end
    return w
  end

  --- nn.utils.weight_norm(module, name = "weight", dim = 1): PyTorch's older
  -- weight normalisation: parameters name_g (the norms) and name_v (the
  -- direction) replace parameter `name`, which a forward pre-hook sets to
  -- g * v / ||v|| (norm over every dim but dim; false: over all) before each
  -- forward. Prefer nn.utils.parametrizations.weight_norm.
  -- @return module
  -- @usage local lin = nn.utils.weight_norm(nn.Linear(20, 40))
  function utils.weight_norm(module, name, dim)
    local fname = "weight_norm"
    name = name or "weight"
    if nn.is_module(module) and hook_of(module, "weight_norm:" .. name) then
      fail(fmt("%s: %s already has a weight_norm hook on '%s'", fname, module:class_name(), name))
    end
    local w = own_parameter(module, name, fname)
    dim = weight_norm_dim(dim, w, fname)
    local g_name, v_name = name .. "_g", name .. "_v"
    module[name] = nil
    module:register_parameter(g_name, no_grad(function() return norm_except_dim(w, dim) end))
    module:register_parameter(v_name, nn.Parameter(w))
    local function compute(m) return weight_norm_of(m[g_name], m[v_name], dim) end
    module[name] = compute(module)
    local h = module:register_forward_pre_hook(function(m) m[name] = compute(m) end)
    set_hook(module, "weight_norm:" .. name, { handle = h, compute = compute })
    return module
  end

  --- nn.utils.remove_weight_norm(module, name = "weight"): undoes
  -- nn.utils.weight_norm: `name` is a parameter again, with the current value.
  -- @return module
  -- @usage nn.utils.remove_weight_norm(lin)
  function utils.remove_weight_norm(module, name)
    name = name or "weight"
    local h = take_hook(module, "weight_norm", name, "remove_weight_norm")
    local w = h.compute(module):detach()
    module[name] = nil
    module[name .. "_g"] = nil
    module[name .. "_v"] = nil
    module:register_parameter(name, w)
    return module
  end

  --- nn.utils.spectral_norm(module, name = "weight", n_power_iterations = 1,
  -- eps = 1e-12, dim): PyTorch's older spectral normalisation: parameter
  -- name_orig and buffers name_u, name_v replace parameter `name`, which a
  -- forward pre-hook sets to name_orig / sigma before each forward (with
  -- n_power_iterations steps of power iteration in training mode). Prefer
  -- nn.utils.parametrizations.spectral_norm.
  -- @return module
  -- @usage local lin = nn.utils.spectral_norm(nn.Linear(20, 40))
  function utils.spectral_norm(module, name, n_power_iterations, eps, dim)
    local fname = "spectral_norm"
    name = name or "weight"
    if nn.is_module(module) and hook_of(module, "spectral_norm:" .. name) then
      fail(fmt("%s: %s already has a spectral_norm hook on '%s'", fname, module:class_name(), name))
    end
    local w = own_parameter(module, name, fname)
    local n = need_count(n_power_iterations or 1, fname)
    eps = need_eps(eps or 1e-12, fname)
    dim = spectral_dim(module, dim, w, fname)
    local u, v = no_grad(function() return random_uv(as_matrix(w, dim), eps) end)
    local o_name, u_name, v_name = name .. "_orig", name .. "_u", name .. "_v"
    module[name] = nil
    module:register_parameter(o_name, w)
    module:register_buffer(u_name, u)
    module:register_buffer(v_name, v)
    module[name] = w:detach()   -- until the first forward, as PyTorch keeps weight.data
    local function compute(m, power)
      local W = m[o_name]
      local mat = as_matrix(W, dim)
      local uu, vv = m[u_name], m[v_name]
      if power then
        power_iteration(mat, uu, vv, n, eps, true)
        uu, vv = uu:clone(), vv:clone()
      end
      return W / tide.vdot(uu, mat:mv(vv))
    end
    local h = module:register_forward_pre_hook(function(m) m[name] = compute(m, m.training) end)
    set_hook(module, "spectral_norm:" .. name, { handle = h, compute = compute })
    return module
  end

  --- nn.utils.remove_spectral_norm(module, name = "weight"): undoes
  -- nn.utils.spectral_norm: `name` is a parameter again, holding name_orig / sigma.
  -- @return module
  -- @usage nn.utils.remove_spectral_norm(lin)
  function utils.remove_spectral_norm(module, name)
    name = name or "weight"
    local h = take_hook(module, "spectral_norm", name, "remove_spectral_norm")
    local w = no_grad(function() return h.compute(module, false) end):detach()
    for _, k in ipairs { name, name .. "_u", name .. "_v", name .. "_orig" } do module[k] = nil end
    module:register_parameter(name, w)
    return module
  end
end
