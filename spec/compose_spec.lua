-- compose_spec: the functions and methods of tide.compose (compositions of
-- existing ops) against hand-computed values, on contiguous and strided
-- layouts, empty and 0-d tensors, their gradients (gradcheck in float64) and
-- their errors.
local tide = require "tide"
local H = require "spec.helpers"

local gradcheck = tide.autograd.gradcheck
local T = tide.tensor
local function I(v) return T(v, "int64") end
local function D(v) return T(v, "float64") end
-- 1..6 as a 2 x 3 float32 matrix
local function m23() return T({ { 1, 2, 3 }, { 4, 5, 6 } }) end
-- each layout of t (contiguous, transposed, strided)
local each_layout = H.each_layout
local function shape(t) return table.concat(t:shape(), ",") end
local inf, nan = math.huge, 0 / 0

describe("tide.compose", function()
  describe("function forms of methods", function()
    it("call the methods", function()
      local x = m23()
      H.equal(tide.reshape(x, 3, 2), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
      H.equal(tide.permute(x, 2, 1), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
      H.equal(tide.transpose(x, -1, 1), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
      H.equal(tide.swapaxes(x, 1, 2), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
      H.equal(x:swapdims(2, 1), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
      assert.are.equal("3", shape(tide.squeeze(tide.ones(1, 3))))
      assert.are.equal("2,3,1", shape(tide.unsqueeze(x, -1)))
      assert.are.equal("2,12", shape(tide.flatten(tide.ones(2, 3, 4), 2)))
      H.equal(tide.narrow(x, 2, 2, 2), { { 2, 3 }, { 5, 6 } })
      H.equal(tide.select(x, 1, -1), { 4, 5, 6 })
      local c = tide.chunk(x, 2, 2)
      assert.are.equal(2, #c)
      H.equal(c[2], { { 3 }, { 6 } })
      H.equal(tide.split(x, { 1, 2 }, -1)[2], { { 2, 3 }, { 5, 6 } })
      H.equal(tide.unbind(x, 2)[3], { 3, 6 })
      H.equal(tide.t(x), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
      assert.are.equal(6, tide.numel(x))
      local y = tide.clone(x)
      y:fill_(0)
      H.equal(x, { { 1, 2, 3 }, { 4, 5, 6 } })
      H.equal(tide.ravel(x:t()), { 1, 4, 2, 5, 3, 6 })
      H.equal(x:ravel(), { 1, 2, 3, 4, 5, 6 })
      assert.are.equal("1", shape(tide.ravel(T(7))))
      assert.has_error(function() return tide.reshape(5, 2) end, "reshape: argument 1 must be a tensor, got number")
    end)

    it("movedim and moveaxis", function()
      assert.are.equal("3,4,2", shape(tide.movedim(tide.ones(2, 3, 4), 1, -1)))
      assert.are.equal("3,4,2", shape(tide.ones(2, 3, 4):moveaxis({ 1, 2 }, { 3, 1 })))
      assert.are.equal("4,2,3", shape(tide.ones(2, 3, 4):movedim(-1, 1)))
      each_layout(m23(), function(x) H.equal(x:movedim(1, 2), { { 1, 4 }, { 2, 5 }, { 3, 6 } }) end)
      local a = tide.ones(2, 3, 4)
      assert.has_error(function() return a:movedim({ 1, 2 }, 1) end,
        "movedim: source and destination must have the same number of dims, got 2 and 1")
      assert.has_error(function() return a:movedim({ 1, -3 }, { 1, 2 }) end, "movedim: repeated dim -3 in source")
      assert.has_error(function() return a:movedim({ 1, 2 }, { 2, 2 }) end, "movedim: repeated dim 2 in destination")
      assert.has_error(function() return a:movedim(4, 1) end, "movedim: dimension 4 is out of range for a 3-d tensor")
    end)

    it("unflatten", function()
      local x = tide.arange(1, 13):reshape(2, 6)
      H.equal(x:unflatten(2, { 2, -1 }), { { { 1, 2, 3 }, { 4, 5, 6 } }, { { 7, 8, 9 }, { 10, 11, 12 } } })
      H.equal(tide.unflatten(x:t(), -1, { 2, 1 }), H.nest({ 1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12 }, { 6, 2, 1 }))
      assert.are.equal("2,0,3", shape(tide.zeros(2, 0):unflatten(2, { 0, 3 })))
      assert.has_error(function() return x:unflatten(2, { 4, 2 }) end,
        "unflatten: sizes [4,2] don't multiply up to the size of dimension 2 (6)")
      assert.has_error(function() return x:unflatten(2, { -1, -1 }) end, "unflatten: only one size may be -1")
      assert.has_error(function() return x:unflatten(2, { 4, -1 }) end,
        "unflatten: sizes [4,-1] cannot split dimension 2 of size 6")
      assert.has_error(function() return x:unflatten(3, { 6 }) end,
        "unflatten: dimension 3 is out of range for a 2-d tensor")
    end)

    it("broadcast_to, broadcast_tensors and broadcast_shapes", function()
      assert.are.same({ 2, 4, 3 }, tide.broadcast_shapes({ 2, 1, 3 }, { 4, 1 }, { 3 }))
      H.equal(tide.broadcast_to(T({ 1, 2 }), { 2, 2 }), { { 1, 2 }, { 1, 2 } })
      H.equal(T({ { 1 }, { 2 } }):broadcast_to(2, 3), { { 1, 1, 1 }, { 2, 2, 2 } })
      local r = tide.broadcast_tensors(T({ { 1 }, { 2 } }), T({ 3, 4, 5 }))
      H.equal(r[1], { { 1, 1, 1 }, { 2, 2, 2 } })
      H.equal(r[2], { { 3, 4, 5 }, { 3, 4, 5 } })
      assert.are.equal("0,3", shape(tide.broadcast_tensors({ tide.zeros(0, 1), tide.zeros(3), T(1) })[3]))
      assert.has_error(function() return tide.broadcast_tensors(tide.ones(2, 3), tide.ones(4)) end,
        "broadcast_tensors: shapes [2,3] and [4] cannot be broadcast together (dimension 1 from the end: 3 vs 4)")
      assert.has_error(function() return tide.broadcast_tensors(tide.ones(2), 3) end,
        "broadcast_tensors: argument 2 must be a tensor, got number")
    end)
  end)

  describe("tensor methods", function()
    it("tolist, ndimension, type", function()
      local x = m23()
      assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, x:tolist())
      assert.are.equal(2, x:ndimension())
      assert.are.equal("float32", x:type())
      assert.are.equal("int64", x:type("int64"):dtype())
      assert.are.equal("float64", x:type("torch.DoubleTensor"):dtype())
      assert.are.equal(x, x:type("float32"))
      assert.has_error(function() return x:type("quad") end, "type: unknown dtype quad")
    end)

    it("new_zeros, new_ones, new_full, new_empty, new_tensor", function()
      local x = tide.ones(2, "int32")
      local z = x:new_zeros(2, 3)
      H.equal(z, { { 0, 0, 0 }, { 0, 0, 0 } })
      assert.are.equal("int32", z:dtype())
      assert.are.equal(x:device(), z:device())
      local o = x:new_ones({ 2 }, "float64")
      H.equal(o, { 1, 1 })
      assert.are.equal("float64", o:dtype())
      assert.are.equal("float32", x:new_ones(3, { dtype = "float32" }):dtype())
      local f = x:new_full({ 2 }, 7)
      H.equal(f, { 7, 7 })
      assert.are.equal("int32", f:dtype())
      assert.are.equal("1,0", shape(x:new_empty(1, 0)))
      assert.are.equal("int32", x:new_empty({ 0 }):dtype())
      H.equal(x:new_tensor({ 1, 2 }), { 1, 2 })
      assert.are.equal("int32", x:new_tensor({ 1, 2 }):dtype())
      local src = T({ 1.5 }):requires_grad_()
      local c = x:new_tensor(src, { dtype = "float64" })
      H.equal(c, { 1.5 })
      assert.is_false(c.requires_grad)
      assert.is_true(T({ 1 }):new_zeros(2, { requires_grad = true }).requires_grad)
      assert.has_error(function() return x:new_zeros(2, { dtipe = "int32" }) end, "new_zeros: unknown option 'dtipe'")
      assert.has_error(function() return x:new_ones(-1) end, "new_ones: sizes must be a non-negative integer, got -1")
    end)

    it("clamp_min, clamp_max and their in-place forms", function()
      local x = T({ -2, 0.5, 3 })
      H.equal(tide.clamp_min(x, 0), { 0, 0.5, 3 })
      H.equal(x:clamp_max(1), { -2, 0.5, 1 })
      H.equal(x:clamp_min(T({ 0, 1, 0 })), { 0, 1, 3 })
      x:clamp_max_(0)
      H.equal(x, { -2, 0, 0 })
      x:clamp_min_(-1)
      H.equal(x, { -1, 0, 0 })
      assert.has_error(function() return x:clamp_min() end, "clamp_min: min must be a number or a tensor, got nil")
      assert.has_error(function() return x:clamp_max() end, "clamp_max: max must be a number or a tensor, got nil")
    end)

    it("square and square_", function()
      H.equal(tide.square(T({ -3, 2 }, "int64")), { 9, 4 })
      local x = T({ 1.5, -2 })
      x:square_()
      H.equal(x, { 2.25, 4 })
      assert.has_error(function() return tide.square(3) end, "square: argument 1 must be a tensor, got number")
    end)

    it("sum_to_size", function()
      local x = m23()
      H.equal(x:sum_to_size(1, 3), { { 5, 7, 9 } })
      H.equal(x:sum_to_size({ 3 }), { 5, 7, 9 })
      H.equal(x:sum_to_size(2, 1), { { 6 }, { 15 } })
      H.equal(x:sum_to_size(1), { 21 })
      H.equal(x:sum_to_size(2, 3), x:totable())
      assert.has_error(function() return x:sum_to_size(2) end, "sum_to_size: size [2] is not expandable to size [2,3]")
      assert.has_error(function() return x:sum_to_size(1, 2, 3) end,
        "sum_to_size: size [1,2,3] is not expandable to size [2,3]")
    end)
  end)

  describe("repeat_interleave", function()
    it("repeats a number of times along a dim, or flattened", function()
      each_layout(m23(), function(x)
        H.equal(x:repeat_interleave(2, 1), { { 1, 2, 3 }, { 1, 2, 3 }, { 4, 5, 6 }, { 4, 5, 6 } })
        H.equal(tide.repeat_interleave(x, 2, -1), { { 1, 1, 2, 2, 3, 3 }, { 4, 4, 5, 5, 6, 6 } })
        H.equal(x:repeat_interleave(2), { 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6 })
      end)
      assert.are.equal("2,0", shape(m23():repeat_interleave(0, 2)))
      H.equal(T(5):repeat_interleave(3), { 5, 5, 5 })
    end)

    it("repeats by a tensor of counts", function()
      each_layout(m23(), function(x)
        H.equal(x:repeat_interleave(I({ 2, 0, 1 }), 2), { { 1, 1, 3 }, { 4, 4, 6 } })
        H.equal(x:repeat_interleave(I({ 0, 3 }), 1), { { 4, 5, 6 }, { 4, 5, 6 }, { 4, 5, 6 } })
      end)
      H.equal(T({ 7, 8 }):repeat_interleave(I(2)), { 7, 7, 8, 8 })
      H.equal(T({ 7, 8, 9 }):repeat_interleave(I({ 1, 2, 0 }), 1, { output_size = 3 }), { 7, 8, 8 })
      H.equal(T({ 7, 8 }):repeat_interleave(I({ 0, 0 })), {})
      H.equal(tide.repeat_interleave(I({ 2, 0, 1 })), { 1, 1, 3 })
      assert.are.equal("0", shape(tide.zeros(0):repeat_interleave(I({}))))
    end)

    it("checks its arguments", function()
      local x = m23()
      assert.has_error(function() return x:repeat_interleave(-1, 1) end,
        "repeat_interleave: repeats must be a non-negative integer, got -1")
      assert.has_error(function() return x:repeat_interleave(I({ 1, 2 }), 2) end,
        "repeat_interleave: repeats must have one count per element of dimension 2 (3), got 2")
      assert.has_error(function() return x:repeat_interleave(T({ 1, 2, 3 }), 2) end,
        "repeat_interleave: repeats must be an integer tensor, got float32")
      assert.has_error(function() return x:repeat_interleave(I({ 1, -1, 3 }), 2) end,
        "repeat_interleave: repeats must not be negative, got -1")
      assert.has_error(function() return x:repeat_interleave(I({ { 1 } }), 2) end,
        "repeat_interleave: repeats must be 0-d or 1-d, got 2-d")
      assert.has_error(function() return x:repeat_interleave(2, 3) end,
        "repeat_interleave: dimension 3 is out of range for a 2-d tensor")
      assert.has_error(function() return x:repeat_interleave(2, 1, { size = 3 }) end,
        "repeat_interleave: unknown option 'size'")
    end)
  end)

  describe("roll, rot90, tile", function()
    it("roll shifts along dims, wrapping around", function()
      each_layout(m23(), function(x)
        H.equal(x:roll(1, 2), { { 3, 1, 2 }, { 6, 4, 5 } })
        H.equal(tide.roll(x, -1, -1), { { 2, 3, 1 }, { 5, 6, 4 } })
        H.equal(x:roll({ 1, 4 }, { 1, 2 }), { { 6, 4, 5 }, { 3, 1, 2 } })
        H.equal(x:roll(2), { { 5, 6, 1 }, { 2, 3, 4 } })          -- flattened
        H.equal(x:roll(3, 2), x:totable())
      end)
      assert.are.equal("0,3", shape(tide.zeros(0, 3):roll(1, 1)))
      H.equal(T(5):roll(1), 5)
      local x = m23()
      assert.has_error(function() return x:roll({ 1, 2 }, { 1 }) end,
        "roll: shifts and dims must have the same length, got 2 and 1")
      assert.has_error(function() return x:roll({ 1, 2 }) end,
        "roll: without dims, shifts must be a single number, got 2")
      assert.has_error(function() return x:roll(1.5, 1) end, "roll: shifts must be integers, got 1.5")
      assert.has_error(function() return x:roll(1, 3) end, "roll: dimension 3 is out of range for a 2-d tensor")
    end)

    it("rot90 turns the plane of two dims", function()
      each_layout(m23(), function(x)
        H.equal(x:rot90(), { { 3, 6 }, { 2, 5 }, { 1, 4 } })
        H.equal(tide.rot90(x, 2), { { 6, 5, 4 }, { 3, 2, 1 } })
        H.equal(x:rot90(3), { { 4, 1 }, { 5, 2 }, { 6, 3 } })
        H.equal(x:rot90(-1), { { 4, 1 }, { 5, 2 }, { 6, 3 } })
        H.equal(x:rot90(1, { 2, 1 }), { { 4, 1 }, { 5, 2 }, { 6, 3 } })
        H.equal(x:rot90(4), x:totable())
      end)
      local x = m23()
      assert.has_error(function() return x:rot90(1, { 1 }) end, "rot90: dims must have length 2, got 1")
      assert.has_error(function() return x:rot90(1, { 1, -2 }) end, "rot90: dims must be different, got 1 and -2")
      assert.has_error(function() return T({ 1, 2 }):rot90() end,
        "rot90: expected a tensor of at least 2 dimensions, got 1")
    end)

    it("tile repeats the whole tensor", function()
      each_layout(m23(), function(x)
        H.equal(x:tile(2), { { 1, 2, 3, 1, 2, 3 }, { 4, 5, 6, 4, 5, 6 } })
        H.equal(tide.tile(x, 2, 1), { { 1, 2, 3 }, { 4, 5, 6 }, { 1, 2, 3 }, { 4, 5, 6 } })
      end)
      H.equal(T({ 1, 2 }):tile({ 2, 1 }), { { 1, 2 }, { 1, 2 } })
      assert.are.equal("0,3", shape(m23():tile(0, 1)))
      assert.has_error(function() return m23():tile(-1) end, "tile: reps must be a non-negative integer, got -1")
    end)
  end)

  describe("diagonals", function()
    local sq = function() return T({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }) end

    it("diagonal is a view of a diagonal", function()
      each_layout(sq(), function(x)
        H.equal(x:diagonal(), { 1, 5, 9 })
        H.equal(x:diagonal(1), { 2, 6 })
        H.equal(tide.diagonal(x, -2), { 7 })
        H.equal(x:diagonal(3), {})
        H.equal(x:diagonal(-5), {})
      end)
      each_layout(m23(), function(x)
        H.equal(x:diagonal(), { 1, 5 })
        H.equal(x:diagonal(0, 2, 1), { 1, 5 })
        H.equal(x:diagonal(-1), { 4 })
      end)
      -- a 3-d tensor: the diagonal of the planes (dims 1, 3) becomes the last dim
      local c = tide.arange(1, 13):reshape(2, 3, 2)
      H.equal(c:diagonal(0, 1, -1), { { 1, 8 }, { 3, 10 }, { 5, 12 } })
      H.equal(c:diagonal(0, 3, 1), { { 1, 8 }, { 3, 10 }, { 5, 12 } })
      local x = sq()
      x:diagonal():fill_(0)    -- a view: writes reach x
      H.equal(x, { { 0, 2, 3 }, { 4, 0, 6 }, { 7, 8, 0 } })
      assert.has_error(function() return T({ 1, 2 }):diagonal() end,
        "diagonal: expected a tensor of at least 2 dimensions, got 1")
      assert.has_error(function() return x:diagonal(0, 1, -2) end, "diagonal: dim1 and dim2 must be different, got 1 and -2")
      assert.has_error(function() return x:diagonal(0, 1, 3) end, "diagonal: dimension 3 is out of range for a 2-d tensor")
      assert.has_error(function() return x:diagonal(0.5) end, "diagonal: offset must be an integer, got 0.5")
    end)

    it("diag_embed, diag and trace", function()
      H.equal(tide.diag_embed(T({ 1, 2 })), { { 1, 0 }, { 0, 2 } })
      H.equal(T({ { 1, 2 }, { 3, 4 } }):diag_embed(1),
        { { { 0, 1, 0 }, { 0, 0, 2 }, { 0, 0, 0 } }, { { 0, 3, 0 }, { 0, 0, 4 }, { 0, 0, 0 } } })
      H.equal(tide.diag_embed(T({ { 1, 2 }, { 3, 4 } }), 0, 1, 3), { { { 1, 0 }, { 3, 0 } }, { { 0, 2 }, { 0, 4 } } })
      each_layout(T({ 1, 2 }), function(v)
        H.equal(tide.diag(v), { { 1, 0 }, { 0, 2 } })
        H.equal(v:diag(1), { { 0, 1, 0 }, { 0, 0, 2 }, { 0, 0, 0 } })
        H.equal(v:diag(-1), { { 0, 0, 0 }, { 1, 0, 0 }, { 0, 2, 0 } })
      end)
      assert.are.equal("int32", tide.diag(T({ 1, 2 }, "int32")):dtype())
      H.equal(tide.diag(T({ true, false })), { { true, false }, { false, false } })
      assert.are.equal("bool", tide.diag(T({ true, false })):dtype())
      H.equal(tide.diag(tide.zeros(0), 2), { { 0, 0 }, { 0, 0 } })
      each_layout(sq(), function(x)
        H.equal(x:diag(), { 1, 5, 9 })
        H.equal(tide.diag(x, -1), { 4, 8 })
        H.equal(x:trace(), 15)
      end)
      local x = sq()
      x:diag():fill_(0)        -- a copy: x keeps its values
      H.equal(x:trace(), 15)
      assert.are.equal("int64", T({ { 1, 2 }, { 3, 4 } }, "int32"):trace():dtype())
      H.equal(m23():trace(), 6)
      assert.has_error(function() return tide.ones(2, 2, 2):diag() end, "diag: expected a 1-d or 2-d tensor, got 3-d")
      assert.has_error(function() return T({ 1 }):trace() end, "trace: expected a 2-d tensor, got 1-d")
      assert.has_error(function() return T(1):diag_embed() end,
        "diag_embed: expected a tensor of at least 1 dimension, got 0")
      assert.has_error(function() return T({ 1 }):diag_embed(0, 1, -2) end,
        "diag_embed: dim1 and dim2 must be different, got 1 and -2")
    end)

    it("tril_indices and triu_indices", function()
      H.equal(tide.tril_indices(3, 3), { { 1, 2, 2, 3, 3, 3 }, { 1, 1, 2, 1, 2, 3 } })
      H.equal(tide.tril_indices(2, 3, 1), { { 1, 1, 2, 2, 2 }, { 1, 2, 1, 2, 3 } })
      H.equal(tide.triu_indices(2, 3, 1), { { 1, 1, 2 }, { 2, 3, 3 } })
      H.equal(tide.triu_indices(3, 2, -1), { { 1, 1, 2, 2, 3 }, { 1, 2, 1, 2, 2 } })
      local r = tide.triu_indices(2, 2, 0, { dtype = "int32" })
      H.equal(r, { { 1, 1, 2 }, { 1, 2, 2 } })
      assert.are.equal("int32", r:dtype())
      assert.are.equal("int64", tide.tril_indices(1, 1):dtype())
      assert.are.equal("2,0", shape(tide.tril_indices(0, 3)))
      assert.has_error(function() return tide.tril_indices(-1, 3) end,
        "tril_indices: row must be a non-negative integer, got -1")
      assert.has_error(function() return tide.triu_indices(2, 2, 0, { dtpye = "int32" }) end,
        "triu_indices: unknown option 'dtpye'")
    end)
  end)

  describe("grids, stacking and splitting", function()
    it("meshgrid and cartesian_prod", function()
      local a, b = T({ 1, 2 }), T({ 3, 4, 5 })
      local g = tide.meshgrid(a, b)
      H.equal(g[1], { { 1, 1, 1 }, { 2, 2, 2 } })
      H.equal(g[2], { { 3, 4, 5 }, { 3, 4, 5 } })
      g = tide.meshgrid({ a, b }, { indexing = "xy" })
      H.equal(g[1], { { 1, 2 }, { 1, 2 }, { 1, 2 } })
      H.equal(g[2], { { 3, 3 }, { 4, 4 }, { 5, 5 } })
      assert.are.equal("2,3,1", shape(tide.meshgrid(a, b, T(7))[3]))
      assert.are.equal("0,3", shape(tide.meshgrid(tide.zeros(0), b)[2]))
      H.equal(tide.cartesian_prod(a, b), { { 1, 3 }, { 1, 4 }, { 1, 5 }, { 2, 3 }, { 2, 4 }, { 2, 5 } })
      H.equal(tide.cartesian_prod(a), { 1, 2 })
      assert.has_error(function() return tide.meshgrid(a, { indexing = "yx" }) end,
        "meshgrid: indexing must be 'ij' or 'xy', got 'yx'")
      assert.has_error(function() return tide.meshgrid(a, tide.ones(2, 2)) end,
        "meshgrid: tensor 2 must be 0-d or 1-d, got 2-d")
      assert.has_error(function() return tide.meshgrid() end, "meshgrid: expects at least one tensor")
      assert.has_error(function() return tide.cartesian_prod(a, T(1)) end, "cartesian_prod: tensor 2 must be 1-d, got 0-d")
    end)

    it("atleast_nd, hstack, vstack, row_stack, dstack, column_stack", function()
      assert.are.equal("1", shape(tide.atleast_1d(T(3))))
      assert.are.equal("1,2", shape(tide.atleast_2d(T({ 1, 2 }))))
      assert.are.equal("1,2,1", shape(tide.atleast_3d(T({ 1, 2 }))))
      assert.are.equal("2,3,1", shape(tide.atleast_3d({ T(1), m23() })[2]))
      local a, b = T({ 1, 2 }), T({ 3, 4 })
      H.equal(tide.hstack({ a, b }), { 1, 2, 3, 4 })
      H.equal(tide.vstack({ a, b }), { { 1, 2 }, { 3, 4 } })
      H.equal(tide.row_stack({ a, T({ { 5, 6 } }) }), { { 1, 2 }, { 5, 6 } })
      H.equal(tide.dstack({ a, b }), { { { 1, 3 }, { 2, 4 } } })
      H.equal(tide.column_stack({ a, b, T({ { 9 }, { 8 } }) }), { { 1, 3, 9 }, { 2, 4, 8 } })
      each_layout(m23(), function(x)
        H.equal(tide.hstack({ x, x:narrow(2, 1, 1) }), { { 1, 2, 3, 1 }, { 4, 5, 6, 4 } })
        H.equal(tide.vstack({ x, a:reshape(1, 2):repeat_tensor(1, 2):narrow(2, 1, 3) }),
          { { 1, 2, 3 }, { 4, 5, 6 }, { 1, 2, 1 } })
      end)
      H.equal(tide.hstack({ T(1), tide.zeros(0), T({ 2 }) }), { 1, 2 })
      assert.has_error(function() return tide.hstack({}) end, "hstack: expects a non-empty table of tensors")
      assert.has_error(function() return tide.vstack({ a, 3 }) end, "vstack: element 2 must be a tensor, got number")
    end)

    it("tensor_split, hsplit, vsplit, dsplit", function()
      local v = tide.arange(1, 8)
      local p = tide.tensor_split(v, 3)
      assert.are.equal(3, #p)
      H.equal(p[1], { 1, 2, 3 }); H.equal(p[2], { 4, 5 }); H.equal(p[3], { 6, 7 })
      p = v:tensor_split({ 2, 5 })
      H.equal(p[1], { 1, 2 }); H.equal(p[2], { 3, 4, 5 }); H.equal(p[3], { 6, 7 })
      p = v:tensor_split({ 3, 1, 9 })
      H.equal(p[1], { 1, 2, 3 }); H.equal(p[2], {}); H.equal(p[3], { 2, 3, 4, 5, 6, 7 }); H.equal(p[4], {})
      assert.are.equal(4, #tide.tensor_split(T({ 1, 2 }), 4))
      each_layout(tide.arange(1, 9):reshape(2, 4), function(x)
        local h = x:hsplit(2)
        H.equal(h[2], { { 3, 4 }, { 7, 8 } })
        H.equal(tide.hsplit(x, { 1 })[2], { { 2, 3, 4 }, { 6, 7, 8 } })
        H.equal(x:vsplit(2)[2], { { 5, 6, 7, 8 } })
        H.equal(x:tensor_split(2, -1)[1], { { 1, 2 }, { 5, 6 } })
      end)
      H.equal(tide.hsplit(v:narrow(1, 1, 6), 3)[3], { 5, 6 })
      H.equal(tide.ones(1, 1, 4):dsplit({ 3 })[2], { { { 1 } } })
      assert.has_error(function() return v:tensor_split(0) end,
        "tensor_split: the number of sections must be a positive integer, got 0")
      assert.has_error(function() return v:tensor_split({ -1 }) end,
        "tensor_split: indices must be a non-negative integer, got -1")
      assert.has_error(function() return v:hsplit(2) end,
        "hsplit: dimension 1 of size 7 cannot be split into 2 equal sections")
      assert.has_error(function() return v:vsplit(1) end, "vsplit: expected a tensor of at least 2 dimensions, got 1")
      assert.has_error(function() return T(1):hsplit(1) end, "hsplit: expected a tensor of at least 1 dimension, got 0")
    end)

    it("flipud and fliplr", function()
      each_layout(m23(), function(x)
        H.equal(x:flipud(), { { 4, 5, 6 }, { 1, 2, 3 } })
        H.equal(tide.fliplr(x), { { 3, 2, 1 }, { 6, 5, 4 } })
      end)
      H.equal(T({ 1, 2 }):flipud(), { 2, 1 })
      assert.has_error(function() return T({ 1, 2 }):fliplr() end,
        "fliplr: expected a tensor of at least 2 dimensions, got 1")
      assert.has_error(function() return T(1):flipud() end, "flipud: expected a tensor of at least 1 dimension, got 0")
    end)
  end)

  describe("comparisons and indices", function()
    it("isclose, allclose, equal", function()
      local a = T({ 1, inf, nan, 1, -inf, 100 }, "float64")
      local b = T({ 1 + 1e-7, inf, nan, inf, inf, 100.0005 }, "float64")
      H.equal(tide.isclose(a, b), { true, true, false, false, false, true })
      H.equal(a:isclose(b, { equal_nan = true }), { true, true, true, false, false, true })
      H.equal(a:isclose(b, 0, 0), { false, true, false, false, false, false })
      H.equal(tide.isclose(T({ 1, 2 }), 1, 0, 1), { true, true })
      H.equal(tide.isclose(I({ 1, 2 }), I({ 1, 3 })), { true, false })
      H.equal(tide.isclose(T({ true, false }), T({ true, true })), { true, false })
      assert.is_true(tide.allclose(m23(), m23() + 1e-6))
      assert.is_false(m23():allclose(m23() + 1e-3))
      assert.is_true(tide.allclose(tide.zeros(0), tide.zeros(0)))
      each_layout(m23(), function(x)
        assert.is_true(tide.equal(x, m23()))
        assert.is_false(x:equal(m23():t()))
      end)
      assert.is_false(tide.equal(T({ nan }), T({ nan })))
      assert.is_true(tide.equal(tide.zeros(0, 2), tide.zeros(0, 2)))
      assert.has_error(function() return tide.isclose(1, 2) end, "isclose: at least one argument must be a tensor")
      assert.has_error(function() return tide.isclose(a, b, -1) end, "isclose: rtol must be a non-negative number, got -1")
      assert.has_error(function() return tide.isclose(a, b, { tol = 1 }) end, "isclose: unknown option 'tol'")
      assert.has_error(function() return tide.equal(a, {}) end, "equal: argument 2 must be a tensor, got table")
    end)

    it("count_nonzero, nonzero, argwhere", function()
      local x = T({ { 0, 1, 2 }, { 3, 0, 0 } })
      each_layout(x, function(v)
        H.equal(tide.count_nonzero(v), 3)
        H.equal(v:count_nonzero(1), { 1, 1, 1 })
        H.equal(v:count_nonzero(-1), { 2, 1 })
        H.equal(v:nonzero(), { { 1, 2 }, { 1, 3 }, { 2, 1 } })
        local t = tide.nonzero(v, { as_tuple = true })
        H.equal(t[1], { 1, 1, 2 }); H.equal(t[2], { 2, 3, 1 })
        H.equal(v:argwhere(), { { 1, 2 }, { 1, 3 }, { 2, 1 } })
      end)
      assert.are.equal("int64", x:nonzero():dtype())
      assert.are.equal("0,2", shape(tide.zeros(2, 2):nonzero()))
      assert.are.equal("0,3", shape(tide.zeros(0, 2, 1):nonzero()))
      assert.are.equal("1,0", shape(T(3):nonzero()))
      assert.are.equal("0,0", shape(T(0):nonzero()))
      H.equal(T(3):nonzero({ as_tuple = true })[1], { 1 })
      H.equal(T({ true, false, true }):nonzero(), { { 1 }, { 3 } })
      H.equal(T(0):count_nonzero(), 0)
      assert.has_error(function() return x:nonzero({ tuple = true }) end, "nonzero: unknown option 'tuple'")
    end)

    it("logical_xor", function()
      H.equal(tide.logical_xor(T({ 0, 1, 2, 0 }), T({ 0, 0, 3, -1 })), { false, true, false, true })
      H.equal(T({ true, false }):logical_xor(true), { false, true })
      assert.has_error(function() return tide.logical_xor(T({ 1 }), "a") end,
        "logical_xor: argument 2 must be a tensor or a number, got string")
    end)
  end)

  describe("pointwise", function()
    it("true_divide and floor_divide", function()
      H.equal(tide.true_divide(I({ 7, -7 }), 2), { 3.5, -3.5 })
      local x = T({ 1, 2 })
      x:true_divide_(4)
      H.equal(x, { 0.25, 0.5 })
      each_layout(D({ { -7, 7, 1 }, { 7.5, -0.5, 5 } }), function(a)
        H.equal(tide.floor_divide(a, D({ 2, -2, 0.1 })), { { -4, -4, 9 }, { 3, 0, 49 } })
      end)
      H.equal(tide.floor_divide(D({ 1, -1, 0 }), 0), { inf, -inf, nan })
      H.equal(tide.floor_divide(D({ -9.7, -9.2, -9 }), D({ 0.1, -0.1, -0.7 })), { -97, 91, 12 })   -- Python's //
      local q = I({ -7, 7, 6, -6 }):floor_divide(I({ 2, -2, 4, 4 }))
      H.equal(q, { -4, -4, 1, -2 })
      assert.are.equal("int64", q:dtype())
      H.equal(tide.floor_divide(9, T({ 2, -4 })), { 4, -3 })
      local y = D({ 7, -7 })
      y:floor_divide_(2)
      H.equal(y, { 3, -4 })
      -- a registry op: two numbers make a 0-d tensor, as for fmod; integers are exact past 2^53
      H.equal(tide.floor_divide(7, -2), -4)
      local big = tide.full({ 2 }, 2 ^ 60, "int64") + tide.tensor({ 1, -1 }, "int64")   -- 2^60 + 1, 2^60 - 1
      H.equal(tide.floor_divide(big, 1) - big, { 0, 0 })
      H.equal(tide.floor_divide(big, 3) * 3 + tide.remainder(big, 3) - big, { 0, 0 })
      -- integers by 0 give 0 (as fmod and remainder; PyTorch's CPU raises), INT_MIN // -1 wraps
      H.equal(I({ 5, -5 }):floor_divide(0), { 0, 0 })
      H.equal(tide.tensor({ -2147483648 }, "int32"):floor_divide(-1), { -2147483648 })
      H.equal(tide.floor_divide(tide.tensor({ 7, 200 }, "uint8"), tide.tensor({ 2, 0 }, "uint8")), { 3, 0 })
    end)

    it("div takes PyTorch's rounding_mode, as a string or an option", function()
      local a = I({ 7, -7 })
      H.equal(a:div(2), { 3.5, -3.5 })
      local fl, tr = a:div(2, "floor"), tide.div(a, 2, { rounding_mode = "trunc" })
      H.equal(fl, { 3, -4 })
      H.equal(tr, { 3, -3 })
      assert.are.equal("int64", fl:dtype())
      H.equal(D({ 7.5, -7.5 }):div(2, "trunc"), { 3, -3 })
      local x = I({ 7, -7 })
      x:div_(2, "floor")
      H.equal(x, { 3, -4 })
      assert.has_error(function() a:div(2, "round") end, "div: rounding_mode must be 'trunc' or 'floor', got round")
    end)

    it("frac, deg2rad, rad2deg", function()
      H.close(tide.frac(T({ -1.5, 2.25, 0, 3 })), { -0.5, 0.25, 0, 0 })
      local x = D({ -2.75 })
      x:frac_()
      H.equal(x, { -0.75 })
      H.equal(T(1.5):frac(), 0.5)
      H.close(tide.deg2rad(D({ 180, -90 })), { math.pi, -math.pi / 2 }, 1e-15)
      H.close(D({ math.pi }):rad2deg(), { 180 }, 1e-15)
      H.close(I({ 180 }):deg2rad(), { math.pi })
      local r = D({ 90 })
      r:deg2rad_()
      H.close(r, { math.pi / 2 }, 1e-15)
      r:rad2deg_()
      H.close(r, { 90 }, 1e-15)
    end)

    it("xlogy and heaviside", function()
      H.close(tide.xlogy(D({ 0, 0, 2, 1, 0, 3 }), D({ 0, nan, 3, inf, inf, 1 })),
        { 0, nan, 2 * math.log(3), inf, 0, 0 }, 1e-15)
      H.close(tide.xlogy(2, D({ math.exp(1) })), { 2 }, 1e-15)
      H.close(D({ 0, 1 }):xlogy(0), { 0, -inf })
      H.equal(tide.heaviside(T({ -1, 0, 2, -0.0 }), T({ 0.5 })), { 0, 0.5, 1, 0.5 })
      H.equal(I({ -3, 0, 3 }):heaviside(I({ 7, 8, 9 })), { 0, 8, 1 })
      assert.has_error(function() return tide.heaviside(T({ 1 }), D({ 1 })) end,
        "heaviside: input and values must have the same dtype, got float32 and float64")
    end)

    it("logaddexp and logaddexp2", function()
      H.close(tide.logaddexp(D({ 0, 1, 1000, -inf, inf, -inf, 2 }), D({ 0, 2, 0, -inf, inf, 3, -1000 })),
        { math.log(2), 2 + math.log(1 + math.exp(-1)), 1000, -inf, inf, 3, 2 }, 1e-14)
      H.close(D({ 1, 3, -inf }):logaddexp2(D({ 1, 0, 5 })), { 2, 3 + math.log(1 + 2 ^ -3) / math.log(2), 5 }, 1e-14)
      H.close(tide.logaddexp(T({ 1 }), 1), { 1 + math.log(2) }, 1e-6)
      H.equal(tide.logaddexp(D({ nan }), D({ 1 })), { nan })
    end)

    it("hypot, fmax, fmin", function()
      H.close(tide.hypot(T({ 3, -5, 0, 1e30 }), T({ 4, 12, 0, 1e30 })), { 5, 13, 0, 1e30 * math.sqrt(2) }, 1e-6)
      assert.are.equal("float32", tide.hypot(T({ 3 }), 4):dtype())
      H.equal(tide.hypot(D({ inf }), D({ 1 })), { inf })
      H.equal(tide.fmax(T({ nan, 1, nan, 2 }), T({ 2, nan, nan, 3 })), { 2, 1, nan, 3 })
      H.equal(T({ nan, 1, nan, 2 }):fmin(T({ 2, nan, nan, 3 })), { 2, 1, nan, 2 })
      H.equal(tide.fmax(T({ nan, -1 }), 0), { 0, 0 })
    end)
  end)

  describe("diff, cross, kron, tensordot", function()
    it("diff takes forward differences", function()
      each_layout(T({ { 1, 4, 9, 16 }, { 2, 2, 0, 5 } }), function(x)
        H.equal(tide.diff(x), { { 3, 5, 7 }, { 0, -2, 5 } })
        H.equal(x:diff(2), { { 2, 2 }, { -2, 7 } })
        H.equal(x:diff(1, 1), { { 1, -2, -9, -11 } })
        H.equal(x:diff(0), x:totable())
        H.equal(x:diff(5), { {}, {} })
        H.equal(x:diff(1, -1, T({ { 0 }, { 0 } }), T({ { 20 }, { 1 } })), { { 1, 3, 5, 7, 4 }, { 2, 0, -2, 5, -4 } })
      end)
      H.equal(T({ true, false, false, true }):diff(), { true, false, true })
      assert.are.equal("0", shape(tide.zeros(0):diff()))
      assert.are.equal("int32", I({ 1, 3 }):int():diff():dtype())
      local x = T({ 1, 2 })
      assert.has_error(function() return T(1):diff() end, "diff: expected a tensor of at least 1 dimension, got 0")
      assert.has_error(function() return x:diff(-1) end, "diff: n must be a non-negative integer, got -1")
      assert.has_error(function() return x:diff(1, 1, T(0)) end,
        "diff: prepend must have the same number of dimensions as the input (1), got 0")
      assert.has_error(function() return x:diff(1, 1, nil, 3) end, "diff: append must be a tensor, got number")
      assert.has_error(function() return x:diff(1, 2) end, "diff: dimension 2 is out of range for a 1-d tensor")
    end)

    it("cross takes cross products of 3-vectors", function()
      local a = T({ { 1, 0, 0 }, { 1, 2, 3 } })
      local b = T({ { 0, 1, 0 }, { 4, 5, 6 } })
      each_layout(a, function(x)
        H.equal(tide.cross(x, b), { { 0, 0, 1 }, { -3, 6, -3 } })
        H.equal(x:cross(b, -1), { { 0, 0, 1 }, { -3, 6, -3 } })
        H.equal(x:t():cross(b:t(), 1), { { 0, -3 }, { 0, 6 }, { 1, -3 } })
      end)
      H.equal(tide.cross(a, T({ 0, 0, 1 })), { { 0, -1, 0 }, { 2, -1, 0 } })   -- broadcast
      assert.are.equal("0,3", shape(tide.cross(tide.zeros(0, 3), tide.zeros(0, 3))))
      assert.has_error(function() return tide.cross(tide.ones(2, 4), tide.ones(2, 4)) end,
        "cross: no dimension of size 3 in shape [2,4]")
      assert.has_error(function() return tide.cross(tide.ones(3, 4), tide.ones(3, 4), 2) end,
        "cross: dimension 2 must have size 3, got 4")
      assert.has_error(function() return tide.cross(tide.ones(3), 1) end, "cross: argument 2 must be a tensor, got number")
    end)

    it("kron makes Kronecker products", function()
      local b = T({ { 0, 1 }, { 1, 0 } })
      each_layout(T({ { 1, 2 }, { 3, 4 } }), function(a)
        H.equal(tide.kron(a, b), { { 0, 1, 0, 2 }, { 1, 0, 2, 0 }, { 0, 3, 0, 4 }, { 3, 0, 4, 0 } })
      end)
      H.equal(T({ 1, 2 }):kron(T({ { 1 }, { 10 } })), { { 1, 2 }, { 10, 20 } })
      H.equal(tide.kron(T(2), T(3)), 6)
      H.equal(tide.kron(T({ 1, 2 }), T({ 1, -1, 0 })), { 1, -1, 0, 2, -2, 0 })
      assert.are.equal("0,4", shape(tide.kron(tide.zeros(0, 2), b)))
      assert.has_error(function() return tide.kron(tide.ones(1, 1, 1, 1, 1), T(1)) end,
        "kron: at most 4 dimensions are supported, got 5")
    end)

    it("tensordot contracts dims", function()
      local b = T({ { 1, 0 }, { 0, 1 }, { 1, 1 } })
      each_layout(m23(), function(a)
        H.equal(tide.tensordot(a, b, 1), { { 4, 5 }, { 10, 11 } })
        H.equal(tide.tensordot(a, a, { { 1, 2 }, { 1, 2 } }), 91)
        H.equal(tide.tensordot(a, a), 91)
        H.equal(tide.tensordot(a, b, { { 1 }, { 2 } }), { { 1, 4, 5 }, { 2, 5, 7 }, { 3, 6, 9 } })
        H.equal(tide.tensordot(a, b, { -1, 1 }), { { 4, 5 }, { 10, 11 } })
      end)
      H.equal(tide.tensordot(T({ 1, 2 }), T({ 3, 4 }), 0), { { 3, 4 }, { 6, 8 } })
      H.equal(tide.tensordot(T(2), T(3), 0), 6)
      H.equal(tide.tensordot(tide.zeros(2, 0), tide.zeros(0, 3), 1), { { 0, 0, 0 }, { 0, 0, 0 } })
      local a = m23()
      assert.has_error(function() return tide.tensordot(a, a, 1) end,
        "tensordot: contracted dimension 2 of a has size 3 but dimension 1 of b has size 2")
      assert.has_error(function() return tide.tensordot(a, b, 3) end,
        "tensordot: dims (3) must be at most the dimensions of both tensors (2 and 2)")
      assert.has_error(function() return tide.tensordot(a, b, { { 1, 2 }, { 1 } }) end,
        "tensordot: both dims lists must have the same length, got 2 and 1")
      assert.has_error(function() return tide.tensordot(a, a, { { 1, 1 }, { 1, 2 } }) end,
        "tensordot: a dimension is contracted twice")
      assert.has_error(function() return tide.tensordot(a, b, "x") end,
        "tensordot: dims must be a number or a table {dims of a, dims of b}")
    end)
  end)

  describe("einsum", function()
    it("permutes, traces, reduces and contracts", function()
      local a, b = m23(), T({ { 1, 0 }, { 0, 1 }, { 1, 1 } })
      each_layout(a, function(x)
        H.equal(tide.einsum("ij,jk->ik", x, b), { { 4, 5 }, { 10, 11 } })
        H.equal(tide.einsum("ij,jk", { x, b }), { { 4, 5 }, { 10, 11 } })
        H.equal(tide.einsum("ij->ji", x), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
        H.equal(tide.einsum("ba", x), { { 1, 4 }, { 2, 5 }, { 3, 6 } })    -- implicit: alphabetical
        H.equal(tide.einsum("ij->", x), 21)
        H.equal(tide.einsum("ij->j", x), { 5, 7, 9 })
        H.equal(tide.einsum("ij,ij->i", x, x), { 14, 77 })
        H.equal(tide.einsum("i j , k j -> i k", x, x), { { 14, 32 }, { 32, 77 } })
      end)
      local sq = T({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } })
      H.equal(tide.einsum("ii", sq), 15)
      H.equal(tide.einsum("ii->i", sq), { 1, 5, 9 })
      H.equal(tide.einsum("i,j->ij", T({ 1, 2 }), T({ 3, 4, 5 })), { { 3, 4, 5 }, { 6, 8, 10 } })
      H.equal(tide.einsum("i,i->", T({ 1, 2 }), T({ 3, 4 })), 11)
      H.equal(tide.einsum("ij,jk,k->i", a, b, T({ 1, -1 })), { -1, -1 })
      H.equal(tide.einsum("bij,bjk->bik", a:reshape(1, 2, 3), tide.stack({ b, b * 2 })),
        { { { 4, 5 }, { 10, 11 } }, { { 8, 10 }, { 20, 22 } } })                -- batch dim of size 1 broadcasts
      H.equal(tide.einsum("...ij->...ji", a:reshape(1, 2, 3)), { { { 1, 4 }, { 2, 5 }, { 3, 6 } } })
      H.equal(tide.einsum("...j,j", a, T({ 1, 0, -1 })), { -2, -2 })
      assert.are.equal("2,0", shape(tide.einsum("ij,jk->ik", tide.zeros(2, 3), tide.zeros(3, 0))))
      H.equal(tide.einsum("ij,jk->ik", tide.zeros(2, 0), tide.zeros(0, 1)), { { 0 }, { 0 } })
      H.equal(tide.einsum(",i->i", T(2), T({ 1, 2 })), { 2, 4 })
    end)

    it("checks the equation", function()
      local a = m23()
      assert.has_error(function() return tide.einsum("ij,jk->ik", a, a) end,
        "einsum: subscript 'j' has size 3 in operand 1 but 2 in operand 2")
      assert.has_error(function() return tide.einsum("ij->iz", a) end,
        "einsum: output subscript 'z' does not appear in the inputs")
      assert.has_error(function() return tide.einsum("ijk", a) end,
        "einsum: operand 1 has 2 dimensions but its subscripts 'ijk' name 3")
      assert.has_error(function() return tide.einsum("ij,jk", a) end,
        "einsum: the equation has 2 operands but 1 tensors were given")
      assert.has_error(function() return tide.einsum("i1", a) end,
        "einsum: invalid subscripts 'i1' in operand 1 (use letters and at most one '...')")
      assert.has_error(function() return tide.einsum("ij->ii", a) end,
        "einsum: subscript 'i' appears more than once in the output")
      assert.has_error(function() return tide.einsum("ii", a) end,
        "einsum: subscript 'i' is repeated in operand 1 with sizes 2 and 3")
      assert.has_error(function() return tide.einsum(a, a) end, "einsum: argument 1 must be an equation string, got cdata")
      assert.has_error(function() return tide.einsum("i", 3) end, "einsum: operand 1 must be a tensor, got number")
    end)
  end)

  describe("gradients", function()
    local function rnd(shape, seed)
      local n = 1
      for _, s in ipairs(shape) do n = n * s end
      return D(H.nest(H.values(n, -2, 2, seed), shape)):requires_grad_()
    end

    it("flow through roll, diagonal, diag_embed, repeat_interleave", function()
      local a = rnd({ 3, 4 }, 1)
      assert.is_true(gradcheck(function(x) return x:roll({ 1, -2 }, { 1, 2 }) end, { a }))
      assert.is_true(gradcheck(function(x) return x:diagonal(1) + x:diagonal(-1, 2, 1):sum() end, { a }))
      assert.is_true(gradcheck(function(x) return x:unsqueeze(1):diagonal(0, 3, 2) end, { a }))
      assert.is_true(gradcheck(function(x) return tide.diag_embed(x, -1) end, { rnd({ 2, 2 }, 2) }))
      assert.is_true(gradcheck(function(x) return x:repeat_interleave(I({ 2, 0, 1, 1 }), 2) end, { a }))
    end)

    it("flow through kron, tensordot, diff, cross", function()
      local a, b = rnd({ 2, 3 }, 3), rnd({ 3, 2 }, 4)
      assert.is_true(gradcheck(tide.kron, { a, b }))
      assert.is_true(gradcheck(function(x, y) return tide.tensordot(x, y, { { 1 }, { 2 } }) end, { a, b }))
      assert.is_true(gradcheck(function(x, y) return tide.diff(x, 2, -1, y:narrow(1, 1, 2)) end, { a, b }))
      assert.is_true(gradcheck(function(x, y) return tide.cross(x, y:t()) end, { a, b }))
      assert.is_true(gradcheck(function(x, y) return tide.einsum("ij,jk->ki", x, y) + tide.einsum("ij->j", x):sum() end,
        { a, b }))
      assert.is_true(gradcheck(function(x) return tide.einsum("ii->i", x) end, { rnd({ 2, 2 }, 7) }))
    end)

    it("flow through logaddexp, hypot, xlogy, fmax, trace", function()
      local a, b = rnd({ 2, 3 }, 5), rnd({ 2, 3 }, 6)
      assert.is_true(gradcheck(tide.logaddexp, { a, b }))
      assert.is_true(gradcheck(tide.logaddexp2, { a, b }))
      assert.is_true(gradcheck(tide.hypot, { a, b }))
      assert.is_true(gradcheck(function(x, y) return tide.xlogy(x, y:abs()) end, { a, b }))
      assert.is_true(gradcheck(tide.fmax, { a, b }))
      assert.is_true(gradcheck(function(x) return x:narrow(2, 1, 2):trace() end, { a }))
      -- equal inputs: half the gradient to each
      local x = D({ 1, -2 }):requires_grad_()
      local y = D({ 1, -2 }):requires_grad_()
      tide.logaddexp(x, y):sum():backward()
      H.close(x.grad, { 0.5, 0.5 })
      H.close(y.grad, { 0.5, 0.5 })
    end)
  end)
end)

describe("NaN and infinities", function()
  local inf, nan = math.huge, 0 / 0
  local vals = { 1.5, nan, inf, -inf, -0.0, -2 }

  it("isnan, isinf, isposinf, isneginf, isfinite", function()
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local t = tide.tensor(vals, dt)
      H.equal(t:isnan(), { false, true, false, false, false, false }, dt)
      H.equal(tide.isinf(t), { false, false, true, true, false, false }, dt)
      H.equal(t:isposinf(), { false, false, true, false, false, false }, dt)
      H.equal(t:isneginf(), { false, false, false, true, false, false }, dt)
      H.equal(t:isfinite(), { true, false, false, false, true, true }, dt)
    end
    for _, dt in ipairs { "int64", "int32", "uint8", "bool" } do
      local t = tide.tensor({ 1, 0, 1 }, dt)
      H.equal(t:isnan(), { false, false, false }, dt)
      H.equal(t:isinf(), { false, false, false }, dt)
      H.equal(t:isfinite(), { true, true, true }, dt)
      assert.are.equal("bool", t:isfinite():dtype())
    end
    -- layouts and 0-d
    for name, t in pairs(H.layouts(tide.tensor({ { 1, nan }, { inf, 2 } }))) do
      local flat = H.flat(t:totable())
      local want = {}
      for k, v in ipairs(flat) do want[k] = v ~= v end
      H.equal(t:isnan(), H.nest(want, t:shape()), name)
    end
    assert.is_true(tide.tensor(nan):isnan():item())
  end)

  it("nan_to_num replaces NaN and the infinities, by default with the dtype's extremes", function()
    H.equal(tide.tensor(vals, "float64"):nan_to_num(),
      { 1.5, 0, 1.7976931348623157e308, -1.7976931348623157e308, -0.0, -2 })
    H.equal(tide.tensor(vals):nan_to_num(), { 1.5, 0, 3.4028234663852886e38, -3.4028234663852886e38, -0.0, -2 })
    H.equal(tide.tensor(vals, "float16"):nan_to_num(), { 1.5, 0, 65504, -65504, -0.0, -2 })
    H.equal(tide.nan_to_num(tide.tensor(vals), 7, 8, -9), { 1.5, 7, 8, -9, -0.0, -2 })
    local t = tide.tensor(vals)
    assert.are.equal(t, t:nan_to_num_(1, 2, 3))
    H.equal(t, { 1.5, 1, 2, 3, -0.0, -2 })
    local i = tide.tensor({ 1, 2 }, "int64")
    H.equal(i:nan_to_num(), { 1, 2 })
    -- the gradient passes where nothing was replaced
    local g = tide.tensor({ 1, nan, 2 }, "float64"):requires_grad_()
    g:nan_to_num():sum():backward()
    H.equal(g.grad, { 1, 0, 1 })
    assert.has_error(function() t:nan_to_num("x") end, "nan_to_num: nan must be a number, got string")
  end)
end)

describe("multinomial", function()
  it("draws with replacement in proportion to the weights", function()
    tide.manual_seed(7)
    local d = tide.multinomial(tide.tensor({ 1, 0, 6, 3 }), 20000, true)   -- unnormalised weights
    assert.are.same({ 20000 }, d:shape())
    assert.are.equal("int64", d:dtype())
    local c = { 0, 0, 0, 0 }
    for _, v in ipairs(d:totable()) do c[v] = c[v] + 1 end
    assert.are.equal(0, c[2])
    for k, p in ipairs { 0.1, 0, 0.6, 0.3 } do
      assert.is_true(math.abs(c[k] / 20000 - p) < 0.015, string.format("category %d: %d draws", k, c[k]))
    end
    -- one row each, 2-d; a row with a single nonzero weight always draws it
    local r = tide.multinomial(tide.tensor({ { 0, 0, 2 }, { 5, 0, 0 } }, "float64"), 4, true)
    H.equal(r, { { 3, 3, 3, 3 }, { 1, 1, 1, 1 } })
  end)

  it("draws without replacement: distinct categories, first draws in proportion", function()
    tide.manual_seed(11)
    local p = tide.tensor({ 0.5, 0.25, 0.25, 0 })
    local firsts = { 0, 0, 0, 0 }
    local rows = tide.multinomial(p:view(1, 4):expand(4000, 4):contiguous(), 3)
    assert.are.same({ 4000, 3 }, rows:shape())
    for _, row in ipairs(rows:totable()) do
      assert.is_true(row[1] ~= row[2] and row[2] ~= row[3] and row[1] ~= row[3])
      for _, v in ipairs(row) do assert.are_not.equal(4, v) end   -- weight 0: never drawn
      firsts[row[1]] = firsts[row[1]] + 1
    end
    assert.is_true(math.abs(firsts[1] / 4000 - 0.5) < 0.03, tostring(firsts[1]))
    assert.is_true(math.abs(firsts[2] / 4000 - 0.25) < 0.03, tostring(firsts[2]))
    local all = p:multinomial(3)
    local seen = {}
    for _, v in ipairs(all:totable()) do seen[v] = true end
    assert.is_true(seen[1] and seen[2] and seen[3])
  end)

  it("rejects bad weights and arguments", function()
    local p = tide.tensor({ 0.5, 0, 0.5 })
    assert.has_error(function() p:multinomial(3) end,
      "multinomial: invalid weights: each row must be finite, non-negative and have at least 3 nonzero weights " ..
      "for 3 samples without replacement")
    assert.has_error(function() tide.multinomial(tide.tensor({ 1, -1 }), 1, true) end,
      "multinomial: invalid weights: each row must be finite, non-negative and have a positive sum")
    assert.has_error(function() tide.multinomial(tide.tensor({ { 0, 0 } }), 1, true) end,
      "multinomial: invalid weights: each row must be finite, non-negative and have a positive sum")
    assert.has_error(function() tide.multinomial(tide.tensor({ 1, 0 / 0 }), 1, true) end,
      "multinomial: invalid weights: each row must be finite, non-negative and have a positive sum")
    assert.has_error(function() p:multinomial(4) end,
      "multinomial: cannot draw 4 samples from 3 categories without replacement")
    assert.has_error(function() p:multinomial(0) end, "multinomial: num_samples must be a positive integer, got 0")
    assert.has_error(function() tide.multinomial(tide.tensor({ 1, 2 }, "int64"), 1) end,
      "multinomial: probs must be a floating-point tensor, got int64")
    assert.has_error(function() tide.zeros(2, 2, 2):multinomial(1) end, "multinomial: probs must be 1-d or 2-d, got 3-d")
  end)
end)

describe("norms", function()
  local x = tide.tensor({ { 3, -4, 0 }, { 1, 2, -2 } }, "float64")

  it("norm and linalg.vector_norm for every p, over dims or all", function()
    H.close(x:norm(), math.sqrt(9 + 16 + 1 + 4 + 4), 1e-15)
    H.close(tide.norm(x, "fro"), math.sqrt(34), 1e-15)
    H.close(x:norm(2, 2), { 5, 3 }, 1e-15)
    H.close(x:norm(1, 1), { 4, 6, 2 }, 1e-15)
    H.close(x:norm(3, 2, true), { { (27 + 64) ^ (1 / 3) }, { (1 + 8 + 8) ^ (1 / 3) } }, 1e-14)
    H.close(x:norm(math.huge), 4, 0)
    H.close(x:norm(-math.huge, 2), { 0, 1 }, 0)
    H.close(x:norm(0, 2), { 2, 3 }, 0)
    H.close(x:norm(0.5), (3 ^ 0.5 + 2 + 0 + 1 + 2 ^ 0.5 * 2) ^ 2, 1e-14)
    H.close(tide.linalg.vector_norm(x, "inf", { 1, 2 }, true), { { 4 } }, 0)
    for name, t in pairs(H.layouts(tide.tensor({ { 3, -4 }, { 6, 8 } }))) do
      H.close(t:norm(2, -1), t:mul(t):sum(2):sqrt(), 1e-6, 0, name)
    end
    assert.are.same({}, tide.zeros(0, 3):norm():shape())
    H.close(tide.zeros(0, 3):norm(), 0, 0)
  end)

  it("has gradient 0 where the norm is 0, and the right one elsewhere", function()
    local z = tide.tensor({ { 0, 0 }, { 3, 4 } }, "float64"):requires_grad_()
    z:norm(2, 2):sum():backward()
    H.close(z.grad, { { 0, 0 }, { 0.6, 0.8 } }, 1e-15)
    local y = tide.tensor({ { 0.5, -1, 2 }, { 1.5, 0.3, -0.7 } }, "float64"):requires_grad_()
    for _, p in ipairs { 1, 2, 3, 0.5, math.huge } do
      assert.is_true(tide.autograd.gradcheck(function(a) return a:norm(p, 2) end, { y }), tostring(p))
    end
  end)

  it("linalg.matrix_norm: Frobenius, the largest column or row sums", function()
    local a = tide.tensor({ { 1, -2 }, { 3, 4 } }, "float64")
    H.close(tide.linalg.matrix_norm(a), math.sqrt(30), 1e-15)
    H.close(tide.linalg.matrix_norm(a, 1), 6, 0)
    H.close(tide.linalg.matrix_norm(a, -1), 4, 0)
    H.close(tide.linalg.matrix_norm(a, math.huge), 7, 0)
    H.close(tide.linalg.matrix_norm(a, -math.huge), 3, 0)
    local b = tide.stack({ a, a * 2 })
    H.close(tide.linalg.matrix_norm(b, 1), { 6, 12 }, 0)
    H.close(tide.linalg.matrix_norm(b, 1, { 2, 3 }, true), { { { 6 } }, { { 12 } } }, 0)
    assert.has_error(function() tide.linalg.matrix_norm(tide.ones(3)) end,
      "matrix_norm: input must have at least 2 dimensions, got 1")
    assert.has_error(function() tide.linalg.matrix_norm(a, 3) end,
      "matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, math.huge or -math.huge, got 3")
    assert.has_error(function() x:norm("nuc") end, "norm: ord must be a number, got nuc")
    assert.has_error(function() tide.tensor({ 1, 2 }, "int64"):norm() end,
      "norm: input must be a floating-point tensor, got int64")
  end)
end)
