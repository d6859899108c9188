-- sort_bench.lua: sort, topk and searchsorted on float32s, each next to a
-- plain C reference measured in the same run (bench/ref.c: libc's qsort on
-- (key, position) pairs per row, a binary search loop; one thread each), and
-- the answers compared with the reference's.
-- usage: build/tide bench/sort_bench.lua [device]   (default: the default device)
local tide = require "tide"
local ffi = require "ffi"
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")

ffi.cdef [[
double tide_ref_sort_rows(const float * x, float * y, int64_t * idx, int64_t rows, int64_t n);
double tide_ref_search(const float * seq, int64_t m, const float * v, int64_t n, int64_t * out);
]]
local ref = common.load_ref()

local dev = arg[1] or tide.get_default_device()
local o = { device = dev }

local function best(f) return common.best_ms(f, 5) end

print(string.format("machine: %s, %d threads, device %s", common.cpu_model(), tide.get_num_threads(), dev))
print(string.format("%-44s %10s %12s", "", "tide ms", "C ref ms"))

tide.manual_seed(0)
local function row(name, ms, ref_ms)
  print(string.format("%-44s %10.2f %12s", name, ms, ref_ms and string.format("%.2f", ref_ms) or "-"))
end

for _, shape in ipairs { { 4096, 1024 }, { 16, 262144 }, { 1, 4194304 } } do
  local rows, n = shape[1], shape[2]
  local x = tide.randn(rows, n, o)
  local ms = best(function() return x:sort(2) end)
  local ref_ms
  if ref then
    local xc = x:cpu():contiguous()
    local y = tide.empty({ rows, n })
    local yi = tide.empty({ rows, n }, { dtype = "int64" })
    ref_ms = math.huge
    for _ = 1, 3 do
      ref_ms = math.min(ref_ms, 1e3 * ref.tide_ref_sort_rows(ffi.cast("const float *", xc:data_ptr()),
        ffi.cast("float *", y:data_ptr()), ffi.cast("int64_t *", yi:data_ptr()), rows, n))
    end
    local v, i = x:sort(2)
    assert(v:cpu():eq(y):all():item() and i:cpu():sub(1):eq(yi):all():item(), "sort differs from the reference")
  end
  row(string.format("sort %dx%d along the last dim", rows, n), ms, ref_ms)
  row(string.format("topk 5 of %dx%d along the last dim", rows, n), best(function() return x:topk(5, 2) end))
end

local m, nv = 65536, 4194304
local seq = tide.randn(m, o):sort()
local vals = tide.randn(nv, o)
local ms = best(function() return tide.searchsorted(seq, vals) end)
local ref_ms
if ref then
  local sc, vc = seq:cpu():contiguous(), vals:cpu():contiguous()
  local out = tide.empty({ nv }, { dtype = "int64" })
  ref_ms = math.huge
  for _ = 1, 3 do
    ref_ms = math.min(ref_ms, 1e3 * ref.tide_ref_search(ffi.cast("const float *", sc:data_ptr()), m,
      ffi.cast("const float *", vc:data_ptr()), nv, ffi.cast("int64_t *", out:data_ptr())))
  end
  assert(tide.searchsorted(seq, vals):cpu():sub(1):eq(out):all():item(), "searchsorted differs from the reference")
end
row(string.format("searchsorted %d values in %d", nv, m), ms, ref_ms)
