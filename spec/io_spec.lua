-- io_spec: checkpoints (tide.save / tide.load in the safetensors format) and
-- the readers of tide.io (.npy, .npz, IDX, CSV). Test files are built byte by
-- byte from the formats' descriptions (spec/helpers/files.lua), as another
-- writer would produce them; Tide's own files are checked byte by byte; every
-- kind of corruption must give its error, naming the file and the problem.
local tide = require "tide"
local H = require "spec.helpers"
local F = require "spec.helpers.files"
local cjson = require "cjson"

local dir
setup(function() dir = F.mkdir() end)
teardown(function() F.rmdir(dir) end)
local function path(name) return dir .. "/" .. name end

-- Values for a 2x3 tensor of each dtype.
local function sample(dtype)
  if dtype == "bool" then return tide.tensor({ { true, false, true }, { false, false, true } }) end
  if dtype == "uint8" then return tide.tensor({ { 1, 2, 3 }, { 4, 0, 255 } }, dtype) end
  if dtype:match("float") then return tide.tensor({ { 1, 2.5, -3 }, { 4, 0, 0.125 } }, dtype) end
  return tide.tensor({ { 1, 2, -3 }, { 4, 0, 6 } }, dtype)
end

local function same_tensor(got, want, what)
  assert(tide.is_tensor(got), (what or "value") .. " is not a tensor")
  assert.are.equal(want:dtype(), got:dtype(), what)
  assert.are.same(want:shape(), got:shape(), what)
  assert.are.same(want:totable(), got:totable(), what)
end

-- Deep comparison of what tide.load returned with what was saved.
local function same_value(got, want, where)
  where = where or "root"
  if tide.is_tensor(want) then return same_tensor(got, want, where) end
  if type(want) == "table" then
    assert.are.equal("table", type(got), where)
    for k, v in pairs(want) do same_value(got[k], v, where .. "[" .. tostring(k) .. "]") end
    for k in pairs(got) do assert(want[k] ~= nil, where .. ": unexpected key " .. tostring(k)) end
    return
  end
  assert.are.equal(type(want), type(got), where)
  if want ~= want then assert(got ~= got, where .. " should be NaN") return end
  assert.are.equal(want, got, where)
  if want == 0 then assert.are.equal(1 / want, 1 / got, where .. ": sign of zero") end
end

-- A safetensors file from a header text and data: length, header padded to 8 bytes, data.
local function st_bytes(header, data)
  header = header .. string.rep(" ", (8 - #header % 8) % 8)
  return F.u64(#header) .. header .. (data or "")
end

-- The header of a safetensors file as text (without padding).
local function st_header(bytes)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
  return bytes:sub(9, 8 + n):gsub(" +$", ""), n
end

describe("tide.save / tide.load", function()
  it("round-trips every dtype, 0-d, empty and non-contiguous tensors", function()
    local tbl, want = {}, {}
    for _, dt in ipairs(tide.dtypes()) do
      local t = sample(dt)
      for layout, v in pairs(H.layouts(t)) do tbl[dt .. "." .. layout] = v end
      tbl[dt .. ".scalar"] = t[{ 2, 3 }]
      tbl[dt .. ".empty"] = tide.zeros({ 0, 3 }, dt)
      tbl[dt .. ".empty1"] = tide.zeros({ 4, 0, 2 }, dt)
    end
    assert.is_false(tbl["float32.transposed"]:is_contiguous())
    assert.is_false(tbl["int64.strided"]:is_contiguous())
    for k, v in pairs(tbl) do want[k] = v:contiguous() end
    tide.save(path("all.safetensors"), tbl)
    local got, meta = tide.load(path("all.safetensors"))
    same_value(got, want)
    assert.are.same({}, meta)
    assert.are.same({}, got["float64.scalar"]:shape())
    assert.is_true(got["bool.transposed"]:is_contiguous())
  end)

  it("writes what the format says, byte by byte (as the safetensors library does)", function()
    local p = path("layout.safetensors")
    tide.save(p, {
      w = tide.tensor({ { 1, 2 }, { 3, 4 } }),
      flag = tide.tensor({ true, false, true }),
      b = tide.arange(5),
      h = tide.tensor({ 0.5 }, "float16"),
    })
    local bytes = F.read(p)
    -- tensors by decreasing alignment (int64, float32, float16, bool), then by name;
    -- the reference writer (safetensors 0.8's save_file) gives these exact bytes
    local json = '{"b":{"dtype":"I64","shape":[5],"data_offsets":[0,40]},'
      .. '"w":{"dtype":"F32","shape":[2,2],"data_offsets":[40,56]},'
      .. '"h":{"dtype":"F16","shape":[1],"data_offsets":[56,58]},'
      .. '"flag":{"dtype":"BOOL","shape":[3],"data_offsets":[58,61]}}'
    local padded = math.ceil(#json / 8) * 8
    local data = F.pack("int64_t", { 0, 1, 2, 3, 4 }) .. F.pack("float", { 1, 2, 3, 4 }) .. "\0\56" .. "\1\0\1"
    assert.are.equal(F.u64(padded) .. json .. string.rep(" ", padded - #json) .. data, bytes)
    -- and the invariants, read generically
    local text, n = st_header(bytes)
    assert.are.equal(0, n % 8)
    local h = cjson.decode(text)
    local ranges = {}
    for name, e in pairs(h) do
      ranges[#ranges + 1] = e.data_offsets
      local count = 1
      for _, s in ipairs(e.shape) do count = count * s end
      local size = ({ I64 = 8, F32 = 4, F16 = 2, BOOL = 1 })[e.dtype]
      assert.are.equal(count * size, e.data_offsets[2] - e.data_offsets[1], name)
      assert.are.equal(0, e.data_offsets[1] % size, name .. " is aligned")
    end
    table.sort(ranges, function(a, b) return a[1] < b[1] end)
    local at = 0
    for _, r in ipairs(ranges) do assert.are.equal(at, r[1]); at = r[2] end
    assert.are.equal(#bytes - 8 - n, at)
  end)

  it("reads a file built byte by byte as another writer would", function()
    -- spaces, a different key order, __metadata__ last, data not sorted by
    -- alignment (the float32 tensor starts at byte 3), a bf16 scalar, an empty tensor
    local header = '{"x": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},\n'
      .. ' "y": {"shape": [2, 2], "data_offsets": [3, 19], "dtype": "F32"},\n'
      .. ' "z": {"dtype": "BF16", "shape": [], "data_offsets": [19, 21]},\n'
      .. ' "e": {"dtype": "I32", "shape": [0, 2], "data_offsets": [21, 21]},\n'
      .. ' "__metadata__": {"format": "np", "note": "h\\u00e9"}}'
    local data = "\7\8\9" .. F.pack("float", { 1.5, -2, 3, 4 }) .. "\128\63"
    F.write(path("other.safetensors"), st_bytes(header, data))
    local got, meta = tide.load(path("other.safetensors"))
    same_tensor(got.x, tide.tensor({ 7, 8, 9 }, "uint8"))
    same_tensor(got.y, tide.tensor({ { 1.5, -2 }, { 3, 4 } }))
    same_tensor(got.z, tide.tensor(1, "bfloat16"))
    same_tensor(got.e, tide.zeros({ 0, 2 }, "int32"))
    assert.are.same({ format = "np", note = "hé" }, meta)
  end)

  it("keeps a flat table of tensors as plain names, with no metadata of its own", function()
    local p = path("flat.safetensors")
    tide.save(p, { ["layer.0.weight"] = tide.ones(2, 2), ["1"] = tide.zeros(1) })
    local h = cjson.decode((st_header(F.read(p))))
    assert.is_nil(h.__metadata__)
    assert.is_table(h["layer.0.weight"])
    local got = tide.load(p)
    assert.are.same({ "1", "layer.0.weight" }, (function() local r = {} for k in pairs(got) do r[#r + 1] = k end
      table.sort(r) return r end)())
    assert.is_nil(got[1])
  end)

  it("saves nested tables with numbers, strings and booleans, and loads the same table", function()
    local ckpt = {
      model = { ["layer.0.weight"] = tide.randn(3, 2), ["layer.0.bias"] = tide.zeros(2) },
      optim = {
        state = { [1] = { exp_avg = tide.ones(3, 2), step = 10 }, [2] = {} },
        param_groups = { { lr = 0.001, betas = { 0.9, 0.999 }, eps = 1e-8, amsgrad = false, name = "adamw",
                           params = { 1, 2 } } },
      },
      epoch = 3, note = "", ratio = 1 / 3, big = 2 ^ 53, tiny = 5e-324, neg0 = -0.0,
      inf = math.huge, ninf = -math.huge, nan = 0 / 0, unicode = "héllo ✓", yes = true,
      ints = { [1] = tide.tensor({ 1 }) }, strs = { ["1"] = tide.tensor({ 2 }) }, neg = { [-2] = "minus two", [0] = 0 },
    }
    local p = path("nested.safetensors")
    tide.save(p, ckpt, { metadata = { format = "pt" } })
    local got, meta = tide.load(p)
    same_value(got, ckpt)
    assert.are.equal("number", type(next(got.ints)))
    assert.are.equal("string", type(next(got.strs)))
    assert.are.same({ format = "pt" }, meta)
    -- other readers see the tensors under dotted names and the values as strings
    local h = cjson.decode((st_header(F.read(p))))
    assert.are.same({ 3, 2 }, h["optim.state.1.exp_avg"].shape)
    assert.is_table(h["model.layer.0.weight"])
    assert.are.equal("0.001", h.__metadata__["optim.param_groups.1.lr"])
    assert.are.equal("false", h.__metadata__["optim.param_groups.1.amsgrad"])
    assert.are.equal("10", h.__metadata__["optim.state.1.step"])
    local keys = cjson.decode(h.__metadata__["tide.keys"])
    local found
    for _, e in ipairs(keys) do
      if e[1] == "optim.state.1.exp_avg" then found = e end
    end
    assert.are.same({ "optim.state.1.exp_avg", "tensor", { "optim", "state", 1, "exp_avg" } }, found)
    -- the same table gives the same bytes
    tide.save(path("nested2.safetensors"), ckpt, { metadata = { format = "pt" } })
    assert.are.equal(F.read(p), F.read(path("nested2.safetensors")))
  end)

  it("refuses what it cannot store, naming the key", function()
    local p = path("refused.safetensors")
    local t = tide.ones(1)
    assert.has_error(function() tide.save(p, { a = { b = t }, ["a.b"] = t }) end,
      [[save: the keys ["a"]["b"] and ["a.b"] would both be stored as 'a.b']])
    assert.has_error(function() tide.save(p, { [1] = t, ["1"] = t }) end,
      [[save: the keys [1] and ["1"] would both be stored as '1']])
    assert.has_error(function() tide.save(p, { f = print }) end,
      [[save: the value at ["f"] is a function; only tensors, numbers, strings, booleans and tables can be saved]])
    assert.has_error(function() tide.save(p, { x = { [true] = t } }) end,
      [[save: key true in the table at ["x"] is a boolean; keys must be strings or integers]])
    assert.has_error(function() tide.save(p, { [1.5] = t }) end,
      "save: key 1.5 in the table at the top: number keys must be integers of magnitude below 1e14")
    local cyc = { a = {} }
    cyc.a.b = cyc
    assert.has_error(function() tide.save(p, cyc) end, [[save: the table at ["a"]["b"] contains itself]])
    assert.has_error(function() tide.save(p, t) end, "save: argument 2 must be a table of tensors, got a tensor")
    assert.has_error(function() tide.save(nil, {}) end, "save: argument 1 (path) must be a string, got nil")
    assert.has_error(function() tide.save(p, { x = 1 }, { metadata = { x = "2" } }) end,
      "save: metadata key 'x' is taken by the checkpoint's own entries")
    assert.has_error(function() tide.save(p, {}, { meta = {} }) end, "save: unknown option 'meta'")
    assert.has_error(function() tide.save(p, { ["\255"] = t }) end,
      "save: '" .. p .. "': tensor name '\255' is not valid UTF-8")
    assert.has_error(function() tide.save(p, { __metadata__ = t }) end,
      "save: '" .. p .. "': '__metadata__' cannot name a tensor")
    assert.has_error(function() tide.save(dir .. "/no/such/dir/x.safetensors", { t = t }) end)
    for _, name in ipairs(F.ls(dir)) do assert.is_nil(name:match("^refused"), name) end
  end)

  it("leaves an existing file intact when a save fails", function()
    local p = path("keep.safetensors")
    local good = tide.arange(10)
    tide.save(p, { good = good })
    local before, names = F.read(p), F.ls(dir)
    -- a value that cannot be stored: refused before anything is written
    assert.has_error(function() tide.save(p, { good = good, bad = coroutine.create(print) }) end)
    assert.are.equal(before, F.read(p))
    -- a tensor whose queued op fails: found while the data is written, after
    -- the header and the first tensor went out to the temporary file
    local x = tide.zeros(100000)
    local idx = tide.ones(100000, "int64")
    idx:narrow(1, 100000, 1):fill_(1000000)
    local bad = x:index_select(1, idx)          -- large: queued, fails when it runs
    local ok, err = pcall(tide.save, p, { a = x, b = bad })
    assert.is_false(ok)
    assert.matches("save: '" .. p .. "': tensor 'b': index_select: index 1000000 is out of range", err, 1, true)
    assert.are.equal(before, F.read(p))
    assert.are.same(names, F.ls(dir))           -- no temporary file left behind
    tide.sync()                                 -- the save raised the failure: not again
    same_value(tide.load(p), { good = good })
    -- a file that replaces another keeps its permissions
    os.execute("chmod 640 '" .. p .. "'")
    tide.save(p, { other = good })
    local stat = io.popen("stat -c %a '" .. p .. "'")
    assert.are.equal("640", stat:read("*l"))
    stat:close()
  end)

  it("reports every kind of corruption, naming the file, at the caller's line", function()
    local p = path("bad.safetensors")
    local f32x2 = F.pack("float", { 1, 2 })
    local cases = {
      { "\1\2\3\4\5", "the file is 5 bytes, too short for a safetensors header" },
      { F.u64(1000) .. "{}", "header length 1000 runs past the end of the file (10 bytes)" },
      { st_bytes('{"a": {"dtype": "F32",, }}'), "the header is not valid JSON (near byte 23 of 32)" },
      { st_bytes("[1, 2]"), "the header is not a JSON object" },
      { st_bytes("{} x"), "the header has bytes after its JSON object (at byte 3)" },
      { st_bytes('{"\255": 1}'), "the header is not valid UTF-8" },
      { st_bytes('{"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}', "\1\2"),
        "tensor 'a' has unsupported dtype 'I8' (supported: F32, F64, I32, I64, U8, BOOL, F16, BF16)" },
      { st_bytes('{"a":{"shape":[1],"data_offsets":[0,4]}}', "\0\0\0\0"), "tensor 'a' has no dtype string" },
      { st_bytes('{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', string.rep("\0", 20)),
        "tensor 'a': shape [2,3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20" },
      { st_bytes('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', "\0\0\0\0"),
        "tensor 'a': shape entry 1 is not a non-negative integer" },
      { st_bytes('{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}', "\0\0\0\0"),
        "tensor 'a': shape entry 1 is not a non-negative integer" },
      { st_bytes('{"a":{"dtype":"F32","shape":[1125899906842624,1125899906842624],"data_offsets":[0,4]}}', "\0\0\0\0"),
        "tensor 'a': a shape of 2 dimensions is too large" },
      { st_bytes('{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}', "\0\0\0\0"),
        "tensor 'a' has 9 dimensions, at most 8 are supported" },
      { st_bytes('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}', "\0\0\0\0"),
        "tensor 'a': data_offsets must be two non-negative integers [begin, end]" },
      { st_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}', f32x2),
        "tensor 'a': data_offsets [8, 0] end before they begin" },
      { st_bytes('{"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}}', f32x2 .. f32x2 .. f32x2),
        "tensor 'a': data_offsets [0, 400] run past the end of the data (24 bytes)" },
      { st_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],'
        .. '"data_offsets":[4,12]}}', f32x2 .. "\0\0\0\0"),
        "tensors 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])" },
      { st_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],'
        .. '"data_offsets":[12,20]}}', f32x2 .. "\0\0\0\0" .. f32x2),
        "bytes [8, 12) of the data belong to no tensor" },
      { st_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', f32x2 .. "\0\0\0\0"),
        "bytes [8, 12) of the data belong to no tensor" },
      { st_bytes('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],'
        .. '"data_offsets":[4,8]}}', f32x2), "the name 'a' appears twice" },
      { st_bytes('{"__metadata__":{"k":1}}'), "__metadata__ value of 'k' is not a string" },
    }
    for _, c in ipairs(cases) do
      F.write(p, c[1])
      assert.has_error(function() tide.load(p) end, "load: '" .. p .. "': " .. c[2])
    end
    -- a file of Tide's cut short
    tide.save(p, { w = tide.ones(2, 2) })
    local bytes = F.read(p)
    F.write(p, bytes:sub(1, -5))
    assert.has_error(function() tide.load(p) end,
      "load: '" .. p .. "': tensor 'w': data_offsets [0, 16] run past the end of the data (12 bytes)")
    -- Tide's own metadata, damaged
    F.write(p, st_bytes('{"__metadata__":{"tide.keys":"[oops"}}'))
    local ok, err = pcall(tide.load, p)
    assert.is_false(ok)
    assert.matches("load: '" .. p .. "': the tide.keys metadata is not valid JSON", err, 1, true)
    F.write(p, st_bytes('{"__metadata__":{"tide.keys":"[[\\"x\\",\\"number\\",[\\"x\\"]]]","x":"abc"}}'))
    assert.has_error(function() tide.load(p) end, "load: '" .. p .. [[': metadata 'x' is not a number: "abc"]])
    -- files that are not there, or not files
    assert.has_error(function() tide.load(path("missing")) end,
      "load: cannot open '" .. path("missing") .. "': No such file or directory")
    assert.has_error(function() tide.load(dir) end, "load: cannot open '" .. dir .. "': it is a directory")
    -- at the caller's line
    F.write(p, "short")
    local line = debug.getinfo(1, "l").currentline + 1
    ok, err = pcall(function() tide.load(p) end)
    assert.matches("io_spec.lua:" .. line .. ": load: ", err, 1, true)
  end)

  it("exchanges files with the safetensors library when python3 has it", function()
    local py = os.getenv("TIDE_PYTHON") or "python3"
    if os.execute(py .. " -c 'import numpy, safetensors' >/dev/null 2>&1") ~= 0 then
      print("skipped: " .. py .. " has no numpy and safetensors (set TIDE_PYTHON to a python that has them)")
      return
    end
    tide.save(path("tide.safetensors"), { a = tide.tensor({ { 1, 2 }, { 3, 4 } }, "float64"), b = tide.arange(3):int() })
    local script = F.write(path("x.py"), ([==[
import numpy as np
from safetensors.numpy import load_file, save_file
d = load_file("%s")
assert d["a"].dtype == np.float64 and d["a"].tolist() == [[1, 2], [3, 4]], d
assert d["b"].dtype == np.int32 and d["b"].tolist() == [0, 1, 2], d
save_file({"x": np.arange(6, dtype=np.int16).reshape(2, 3).astype(np.float16),
           "y": np.array([True, False]), "z": np.array(7, dtype=np.int64)}, "%s", metadata={"k": "v"})
]==]):format(path("tide.safetensors"), path("py.safetensors")))
    assert.are.equal(0, os.execute(py .. " " .. script))
    local got, meta = tide.load(path("py.safetensors"))
    same_tensor(got.x, tide.tensor({ { 0, 1, 2 }, { 3, 4, 5 } }, "float16"))
    same_tensor(got.y, tide.tensor({ true, false }))
    same_tensor(got.z, tide.tensor(7, "int64"))
    assert.are.same({ k = "v" }, meta)
  end)
end)

describe("tide.io .npy", function()
  it("round-trips every dtype NumPy has, 0-d, empty and non-contiguous tensors", function()
    for _, dt in ipairs(tide.dtypes()) do
      if dt ~= "bfloat16" then
        local t = sample(dt)
        for layout, v in pairs(H.layouts(t)) do
          tide.io.save_npy(path("r.npy"), v)
          same_tensor(tide.io.load_npy(path("r.npy")), t, dt .. " " .. layout)
        end
        tide.io.save_npy(path("r.npy"), t[{ 1, 2 }])
        same_tensor(tide.io.load_npy(path("r.npy")), t[{ 1, 2 }]:contiguous(), dt .. " 0-d")
        tide.io.save_npy(path("r.npy"), tide.zeros({ 3, 0 }, dt))
        same_tensor(tide.io.load_npy(path("r.npy")), tide.zeros({ 3, 0 }, dt), dt .. " empty")
      end
    end
  end)

  it("writes NumPy's layout: version 1.0, the header padded to 64 bytes, C order", function()
    tide.io.save_npy(path("w.npy"), tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }))
    assert.are.equal(F.npy("<f4", "(2, 3)", F.pack("float", { 1, 2, 3, 4, 5, 6 })), F.read(path("w.npy")))
    tide.io.save_npy(path("w.npy"), tide.arange(3))
    local bytes = F.read(path("w.npy"))
    assert.are.equal(F.npy("<i8", "(3,)", F.pack("int64_t", { 0, 1, 2 })), bytes)
    assert.are.equal(0, (#bytes - 24) % 64)
    tide.io.save_npy(path("w.npy"), tide.tensor(true))
    assert.are.equal(F.npy("|b1", "()", "\1"), F.read(path("w.npy")))
    assert.has_error(function() tide.io.save_npy(path("w.npy"), tide.ones(2, "bfloat16")) end,
      "save_npy: '" .. path("w.npy") .. "': dtype bfloat16 has no NumPy equivalent; convert it first (e.g. t:float())")
    assert.has_error(function() tide.io.save_npy(path("w.npy"), {}) end, "save_npy: argument 2 must be a tensor, got table")
  end)

  it("reads files of several dtypes, byte orders and versions built byte by byte", function()
    local cases = {
      { "<i2", "(2, 2)", F.pack("int16_t", { 1, -2, 300, -32768 }), tide.tensor({ { 1, -2 }, { 300, -32768 } }, "int32") },
      { ">f8", "(3,)", F.pack("double", { 1.5, -2, 1e300 }, true), tide.tensor({ 1.5, -2, 1e300 }, "float64") },
      { "|b1", "(2,)", "\1\0", tide.tensor({ true, false }) },
      { "|u1", "(2,)", "\255\7", tide.tensor({ 255, 7 }, "uint8") },
      { "<u4", "(2,)", F.pack("uint32_t", { 4000000000, 1 }), tide.tensor({ 4000000000, 1 }, "int64") },
      { "|i1", "(3,)", F.pack("int8_t", { -1, 2, -128 }), tide.tensor({ -1, 2, -128 }, "int32") },
      { ">i4", "(2,)", F.pack("int32_t", { -5, 70000 }, true), tide.tensor({ -5, 70000 }, "int32") },
      { ">u2", "(2,)", F.pack("uint16_t", { 65535, 3 }, true), tide.tensor({ 65535, 3 }, "int32") },
      { "<f2", "(2,)", "\0\60\0\192", tide.tensor({ 1, -2 }, "float16") },
      { ">f2", "(2,)", "\60\0\192\0", tide.tensor({ 1, -2 }, "float16") },
      { "=f4", "(1,)", F.pack("float", { 0.25 }), tide.tensor({ 0.25 }) },
      { "<i8", "()", F.pack("int64_t", { 42 }), tide.tensor(42, "int64") },
      { "<f4", "(0, 3)", "", tide.zeros({ 0, 3 }) },
      { "<i4", "(2L, 1L)", F.pack("int32_t", { 7, 8 }), tide.tensor({ { 7 }, { 8 } }, "int32") },   -- Python 2
    }
    for i, c in ipairs(cases) do
      F.write(path("c.npy"), F.npy(c[1], c[2], c[3]))
      same_tensor(tide.io.load_npy(path("c.npy")), c[4], "case " .. i .. " " .. c[1])
    end
    F.write(path("v2.npy"), F.npy("<f4", "(2,)", F.pack("float", { 1, 2 }), false, 2))
    same_tensor(tide.io.load_npy(path("v2.npy")), tide.tensor({ 1, 2 }))
  end)

  it("reads fortran_order arrays as column-major views", function()
    F.write(path("f.npy"), F.npy("<f4", "(2, 3)", F.pack("float", { 1, 4, 2, 5, 3, 6 }), true))
    local t = tide.io.load_npy(path("f.npy"))
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
    assert.is_false(t:is_contiguous())
    assert.are.same({ 1, 2 }, t:stride())
    local vals = {}
    for k = 0, 3 do for j = 0, 2 do for i = 0, 1 do vals[#vals + 1] = i * 12 + j * 4 + k end end end
    F.write(path("f3.npy"), F.npy("<i8", "(2, 3, 4)", F.pack("int64_t", vals), true))
    same_tensor(tide.io.load_npy(path("f3.npy")):contiguous(), tide.arange(24):view(2, 3, 4))
  end)

  it("reports corrupt files, naming the file and the problem", function()
    local p = path("bad.npy")
    local function err(bytes, msg)
      F.write(p, bytes)
      assert.has_error(function() tide.io.load_npy(p) end, "load_npy: '" .. p .. "': " .. msg)
    end
    local f4 = F.pack("float", { 1, 2, 3 })
    err("\147NUMPX\1\0", "not a .npy file (no \\x93NUMPY magic string)")
    err("\147NUM", "truncated: the magic string needs 8 bytes, only 4 remain")
    err("\147NUMPY\4\0\0\0\0\0", ".npy format version 4.0 is not supported (1.0, 2.0 and 3.0 are)")
    err("\147NUMPY\1\0\200\0{'descr'", "truncated: the header needs 200 bytes, only 8 remain")
    err(F.npy("<c8", "(1,)", "12345678"), "dtype '<c8' is not supported (supported: bool, uint8, uint16, uint32, "
      .. "int8, int16, int32, int64, float16, float32, float64)")
    err(F.npy("<u8", "(1,)", "12345678"), "dtype '<u8' is not supported (supported: bool, uint8, uint16, uint32, "
      .. "int8, int16, int32, int64, float16, float32, float64)")
    err(F.npy("<f4", "(3,)", f4:sub(1, 8)), "truncated: the data of shape [3] needs 12 bytes, only 8 remain")
    err(F.npy("<f4", "(3,)", f4 .. "abcd"), "4 unexpected bytes after the array data")
    err(F.npy("<f4", "(1000000000000,)", f4),   -- refused before allocating 4 TB
      "truncated: the data of shape [1000000000000] needs 4000000000000 bytes, only 12 remain")
    err(F.npy("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)", "abcd"), "the array has more than 8 dimensions")
    local function header_err(dict, msg)
      dict = dict .. string.rep(" ", (64 - (10 + #dict + 1) % 64) % 64) .. "\n"
      F.write(p, "\147NUMPY\1\0" .. F.u16(#dict) .. dict .. f4)
      local ok, e = pcall(tide.io.load_npy, p)
      assert.is_false(ok)
      assert.matches("load_npy: '" .. p .. "': " .. msg, e, 1, true)
    end
    header_err("{'descr': '<f4' 'fortran_order': False, 'shape': (3,), }", "malformed header: expected ',' or '}' at byte 16")
    header_err("{'descr': '<f4', 'shape': (3,), }", "malformed header: the key 'fortran_order' is missing")
    header_err("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "malformed header: unexpected key 'x'")
    header_err("{'descr': '<f4', 'fortran_order': maybe, 'shape': (3,), }", "malformed header: expected True or False")
    header_err("{'descr': '<f4', 'fortran_order': False, 'shape': (3,-1), }", "malformed header: expected a dimension size")
    header_err("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\1",   -- bytes shown escaped
      [[malformed header: expected the end of the header at byte 57 of "{'descr': '<f4', 'fortran_order': False, ]]
      .. [['shape': (3,), }\x01"]])
    header_err("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }",
      "structured arrays (a list descr) are not supported")
    assert.has_error(function() tide.io.load_npy(path("none.npy")) end,
      "load_npy: cannot open '" .. path("none.npy") .. "': No such file or directory")
  end)
end)

describe("tide.io .npz", function()
  local x_npy = F.npy("<f4", "(2, 2)", F.pack("float", { 1, 2, 3, 4 }))
  local y_npy = F.npy("<i8", "(5,)", F.pack("int64_t", { 0, 1, 2, 3, 4 }))
  local function check(arrays)
    local names = {}
    for k in pairs(arrays) do names[#names + 1] = k end
    table.sort(names)
    assert.are.same({ "sub/z", "x", "y" }, names)
    same_tensor(arrays.x, tide.tensor({ { 1, 2 }, { 3, 4 } }))
    same_tensor(arrays.y, tide.arange(5))
    same_tensor(arrays["sub/z"], tide.tensor(true))
  end
  local entries = {
    { name = "x.npy", data = x_npy, method = 0 },
    { name = "sub/", data = "", method = 0 },
    { name = "y.npy", data = y_npy, method = 8 },
    { name = "sub/z.npy", data = F.npy("|b1", "()", "\1"), method = 8 },
  }

  it("reads stored and deflated entries, with zip64 records (as numpy writes them) or without", function()
    check(tide.io.load_npz(F.write(path("a.npz"), F.zip(entries))))
    check(tide.io.load_npz(F.write(path("b.npz"), F.zip(entries, { zip64 = true }))))
    check(tide.io.load_npz(F.write(path("c.npz"), F.zip(entries, { comment = "made by hand" }))))
    assert.are.same({}, tide.io.load_npz(F.write(path("e.npz"), F.zip({}))))
  end)

  it("reads archives made by the zip command, when it is installed", function()
    if not F.have("zip") then print("skipped: no zip command to build archives with") return end
    F.write(path("x.npy"), x_npy)
    F.write(path("y.npy"), y_npy)
    for _, level in ipairs({ "-0", "-9" }) do
      os.remove(path("z.npz"))
      assert.are.equal(0, os.execute("cd '" .. dir .. "' && zip -q " .. level .. " z.npz x.npy y.npy"))
      local arrays = tide.io.load_npz(path("z.npz"))
      same_tensor(arrays.x, tide.tensor({ { 1, 2 }, { 3, 4 } }))
      same_tensor(arrays.y, tide.arange(5))
    end
  end)

  it("reads what numpy writes, and numpy reads what Tide writes, when python3 has numpy", function()
    local py = os.getenv("TIDE_PYTHON") or "python3"
    if os.execute(py .. " -c 'import numpy' >/dev/null 2>&1") ~= 0 then
      print("skipped: " .. py .. " has no numpy (set TIDE_PYTHON to a python that has it)")
      return
    end
    tide.io.save_npy(path("t.npy"), tide.tensor({ { 1, 2 }, { 3, 4 } }, "int32"):t())
    local script = F.write(path("np.py"), ([==[
import numpy as np
t = np.load("%s")
assert t.dtype == np.int32 and t.tolist() == [[1, 3], [2, 4]], t
a = np.arange(12, dtype=np.float64).reshape(3, 4)
np.save("%s", np.asfortranarray(a).astype(">f8"))
np.savez("%s", a=a, b=np.array([True, False]))
np.savez_compressed("%s", a=a, c=np.arange(5, dtype=np.int16))
]==]):format(path("t.npy"), path("f.npy"), path("s.npz"), path("d.npz")))
    assert.are.equal(0, os.execute(py .. " " .. script))
    local a = tide.arange(12):double():view(3, 4)
    same_tensor(tide.io.load_npy(path("f.npy")):contiguous(), a)
    local s, d = tide.io.load_npz(path("s.npz")), tide.io.load_npz(path("d.npz"))
    same_tensor(s.a, a)
    same_tensor(s.b, tide.tensor({ true, false }))
    same_tensor(d.a, a)
    same_tensor(d.c, tide.arange(5):int())
  end)

  it("reports corrupt archives, naming the file and the entry", function()
    local p = path("bad.npz")
    local function err(bytes, msg)
      F.write(p, bytes)
      local ok, e = pcall(tide.io.load_npz, p)
      assert.is_false(ok, msg)
      assert.matches("load_npz: '" .. p .. "'" .. msg, e, 1, true)
    end
    local good = F.zip({ { name = "x.npy", data = x_npy, method = 0 } })
    local cd = good:find("PK\1\2", 1, true)
    err(F.poke(good, cd - 1, good:byte(cd - 1) + 1), " entry 'x.npy': CRC-32 mismatch")
    err(good:sub(1, -3), ": not a zip archive (no end of central directory record)")
    err("just some text", ": not a zip archive (no end of central directory record)")
    err(F.zip({ { name = "y.npy", data = y_npy, method = 8, comp = string.rep("\255", 10) } }),
      " entry 'y.npy': corrupt deflate data: invalid block type")
    err(F.zip({ { name = "y.npy", data = y_npy, method = 8, comp = F.deflate(y_npy):sub(1, 20) } }),
      " entry 'y.npy': truncated: ")
    err(F.zip({ { name = "y.npy", data = y_npy, method = 12 } }),
      ": entry 'y.npy' uses compression method 12; only stored (0) and deflated (8) are supported")
    err(F.zip({ { name = "y.npy", data = y_npy, method = 0, flags = 1 } }), ": entry 'y.npy' is encrypted")
    err(F.zip({ { name = "readme.txt", data = "hi", method = 0 } }), ": entry 'readme.txt' is not a .npy file")
    err(F.zip({ { name = "x.npy", data = "not numpy", method = 0 } }),
      " entry 'x.npy': not a .npy file (no \\x93NUMPY magic string)")
    err(F.zip({ { name = "x.npy", data = x_npy, method = 0 }, { name = "x.npy", data = x_npy, method = 8 } }),
      ": the name 'x' appears twice")
    -- the end record points the central directory past the end of the file
    err(good:sub(1, -7) .. F.u32(100000) .. F.u16(0), ": the central directory (")
  end)
end)

describe("tide.io.read_idx", function()
  local u8 = "\0\0\8\3" .. F.be32(2) .. F.be32(3) .. F.be32(2) .. string.char(unpack(tide.arange(12):totable()))
  local want = tide.arange(12):view(2, 3, 2):byte()

  it("reads IDX files, plain and gzip'd", function()
    same_tensor(tide.io.read_idx(F.write(path("a.idx"), u8)), want)
    same_tensor(tide.io.read_idx(F.gzip(path("a.idx.gz"), u8)), want)
    local cases = {
      { "\0\0\13\1" .. F.be32(3) .. F.pack("float", { 1.5, -2, 3 }, true), tide.tensor({ 1.5, -2, 3 }) },
      { "\0\0\14\1" .. F.be32(2) .. F.pack("double", { 1e300, -0.5 }, true), tide.tensor({ 1e300, -0.5 }, "float64") },
      { "\0\0\12\2" .. F.be32(1) .. F.be32(2) .. F.pack("int32_t", { -7, 100000 }, true),
        tide.tensor({ { -7, 100000 } }, "int32") },
      { "\0\0\11\1" .. F.be32(2) .. F.pack("int16_t", { -300, 2 }, true), tide.tensor({ -300, 2 }, "int32") },
      { "\0\0\9\1" .. F.be32(3) .. F.pack("int8_t", { -1, 127, -128 }), tide.tensor({ -1, 127, -128 }, "int32") },
      { "\0\0\8\1" .. F.be32(0), tide.zeros({ 0 }, "uint8") },
    }
    for i, c in ipairs(cases) do same_tensor(tide.io.read_idx(F.gzip(path("c.idx.gz"), c[1])), c[2], "case " .. i) end
  end)

  it("reads files compressed by the gzip command, when it is installed", function()
    if not F.have("gzip") then print("skipped: no gzip command") return end
    F.write(path("g.idx"), u8)
    assert.are.equal(0, os.execute("gzip -f '" .. path("g.idx") .. "'"))
    same_tensor(tide.io.read_idx(path("g.idx.gz")), want)
  end)

  it("reports corrupt files, naming the file and the problem", function()
    local p = path("bad.idx")
    local function err(bytes, msg, gz)
      if gz then F.gzip(p, bytes) else F.write(p, bytes) end
      assert.has_error(function() tide.io.read_idx(p) end, "read_idx: '" .. p .. "': " .. msg)
    end
    err("", "truncated: the magic number needs 4 bytes, only 0 remain")
    err("\1\0\8\1", "not an IDX file: the magic number starts with 0x0100, not 0x0000")
    err("\0\0\10\1" .. F.be32(1) .. "x", "unknown data type code 0x0a (IDX has 0x08, 0x09, 0x0b, 0x0c, 0x0d and 0x0e)")
    err("\0\0\8\0", "0 dimensions; 1 to 8 are supported")
    err("\0\0\8\2" .. F.be32(2), "truncated: the dimension sizes needs 8 bytes, only 4 remain")
    err(u8:sub(1, -2), "truncated: the uint8 data of shape [2,3,2] needs 12 bytes, only 11 remain", true)
    err(u8 .. "abc", "3 unexpected bytes after the data")
    -- sizes no file could hold are refused before anything is allocated
    local huge = "\0\0\8\3" .. F.be32(4000000000) .. F.be32(1000) .. F.be32(2) .. "x"
    local refused = "truncated: the uint8 data of shape [4000000000,1000,2] needs 8000000000000 bytes, "
      .. "more than the rest of the file can hold"
    err(huge, refused)
    err(huge, refused, true)
    err("\0\0\8\3" .. F.be32(4000000000) .. F.be32(4000000000) .. F.be32(4000000000),
      "a shape of 3 dimensions is too large")
    local gz = F.read(F.gzip(path("t.gz"), u8))
    F.write(p, gz:sub(1, -9))   -- without the CRC and length trailer
    assert.has_error(function() tide.io.read_idx(p) end,
      "read_idx: '" .. p .. "': gzip data is truncated or corrupt: unexpected end of file")
    F.write(p, gz:sub(1, -9) .. F.u32(12345) .. F.u32(#u8))   -- a wrong CRC
    assert.has_error(function() tide.io.read_idx(p) end,
      "read_idx: '" .. p .. "': gzip data is truncated or corrupt: incorrect data check")
    assert.has_error(function() tide.io.read_idx(path("none")) end,
      "read_idx: cannot open '" .. path("none") .. "': No such file or directory")
  end)
end)

describe("tide.io.read_csv", function()
  it("reads numbers with a header line and the default delimiter", function()
    F.write(path("a.csv"), "a,b,c\n1,2,3\n4,5.5,-6e2\n")
    local t, names = tide.io.read_csv(path("a.csv"), { header = true })
    same_tensor(t, tide.tensor({ { 1, 2, 3 }, { 4, 5.5, -600 } }))
    assert.are.same({ "a", "b", "c" }, names)
    F.write(path("a2.csv"), "1,2,3\n")
    t, names = tide.io.read_csv(path("a2.csv"), { header = false, dtype = "float64" })
    assert.is_nil(names)
    assert.are.equal("float64", t:dtype())
  end)

  it("handles delimiters, quotes, CRLF, blank lines, a byte order mark and empty fields", function()
    F.write(path("b.csv"), '\239\187\191"x";"y ""z"""\r\n1;2\r\n\r\n "3" ; 4 \r\n5;')
    local t, names = tide.io.read_csv(path("b.csv"), { header = true, delimiter = ";" })
    assert.are.same({ "x", 'y "z"' }, names)
    local v = t:totable()
    assert.are.same({ { 1, 2 }, { 3, 4 } }, { v[1], v[2] })
    assert.are.equal(5, v[3][1])
    assert(v[3][2] ~= v[3][2], "an empty field is NaN")
    F.write(path("c.csv"), "  1 2\t3\n4   5 6  \n")
    same_tensor(tide.io.read_csv(path("c.csv"), { delimiter = " " }), tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }))
    F.write(path("d.tsv"), "1\t2\n")
    same_tensor(tide.io.read_csv(path("d.tsv"), { delimiter = "\t", dtype = "int32" }), tide.tensor({ { 1, 2 } }, "int32"))
  end)

  it("reads integer dtypes exactly, gzip'd files, and empty files", function()
    F.write(path("i.csv"), "9007199254740993,-1\n3.0,1e3\n")
    local t = tide.io.read_csv(path("i.csv"), { dtype = "int64" })
    assert.are.equal(3, (t - 9007199254740990)[{ 1, 1 }]:item())   -- 2^53 + 1: not a double
    assert.are.same({ -1, 3, 1000 }, { t[{ 1, 2 }]:item(), t[{ 2, 1 }]:item(), t[{ 2, 2 }]:item() })
    same_tensor(tide.io.read_csv(F.gzip(path("g.csv.gz"), "1,2\n3,4\n")), tide.tensor({ { 1, 2 }, { 3, 4 } }))
    same_tensor(tide.io.read_csv(F.write(path("e.csv"), "")), tide.zeros(0, 0))
    local e, names = tide.io.read_csv(F.write(path("h.csv"), "p,q,r\n"), { header = true })
    same_tensor(e, tide.zeros(0, 3))
    assert.are.same({ "p", "q", "r" }, names)
  end)

  it("reports bad input, naming the file, the line and the column", function()
    local p = path("bad.csv")
    local function err(text, opts, msg)
      F.write(p, text)
      assert.has_error(function() tide.io.read_csv(p, opts) end, "read_csv: '" .. p .. "': " .. msg)
    end
    err("1,2\n3\n", nil, "line 2 has 1 field where line 1 has 2")
    err("a,b\n1,2,3\n", { header = true }, "line 2 has 3 fields where line 1 has 2")
    err("1,abc\n", nil, "line 1, column 2: 'abc' is not a number")
    err("1,2x\n", { dtype = "int64" }, "line 1, column 2: '2x' is not a number")
    err("300\n", { dtype = "uint8" }, "line 1, column 1: 300 is out of range for dtype uint8")
    err("99999999999\n", { dtype = "int32" }, "line 1, column 1: 99999999999 is out of range for dtype int32")
    err("1.5\n", { dtype = "int32" }, "line 1, column 1: '1.5' is not an integer (dtype int32)")
    err("1,\n", { dtype = "int64" }, "line 1, column 2 is empty (dtype int64 has no NaN)")
    err('"1,2\n', nil, "line 1: a quoted field is not closed")
    err('"1"x,2\n', nil, "line 1: text after a quoted field")
    assert.has_error(function() tide.io.read_csv(p, { delimiter = ",," }) end,
      'read_csv: delimiter must be a one-character string, got ",,"')
    assert.has_error(function() tide.io.read_csv(p, { delimiter = '"' }) end,
      "read_csv: the delimiter must be one ASCII character other than a quote or a line break, got code 34")
    assert.has_error(function() tide.io.read_csv(p, { headers = true }) end, "read_csv: unknown option 'headers'")
    assert.has_error(function() tide.io.read_csv(p, { dtype = "float8" }) end, "read_csv: unknown dtype float8")
    assert.has_error(function() tide.io.read_csv(path("none.csv")) end,
      "read_csv: cannot open '" .. path("none.csv") .. "': No such file or directory")
  end)
end)
