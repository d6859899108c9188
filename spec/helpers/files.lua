--- spec helpers for file formats: a scratch directory, whole-file reads and
-- writes, little- and big-endian packing of numbers, and zlib (the library
-- libtide links, reached through the FFI) for CRC-32, raw deflate and gzip,
-- so that specs build their test files byte by byte from the formats' specs.
local ffi = require "ffi"

local F = {}

pcall(ffi.cdef, [[
unsigned long crc32(unsigned long crc, const unsigned char * buf, unsigned int len);
unsigned long compressBound(unsigned long n);
int compress2(unsigned char * dest, unsigned long * dest_len, const unsigned char * src, unsigned long n, int level);
void * gzopen(const char * path, const char * mode);
int gzwrite(void * file, const void * buf, unsigned int len);
int gzclose(void * file);
]])
local Z = ffi.load("libz.so.1")

--- A new empty directory; F.rmdir removes it.
function F.mkdir()
  local d = os.tmpname()
  os.remove(d)
  os.execute("mkdir -p '" .. d .. "'")
  return d
end
function F.rmdir(d) os.execute("rm -rf '" .. d .. "'") end

--- The names in directory d (sorted).
function F.ls(d)
  local p = io.popen("ls -A '" .. d .. "'")
  local r = {}
  for line in p:lines() do r[#r + 1] = line end
  p:close()
  table.sort(r)
  return r
end

function F.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

function F.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  return path
end

--- Is a shell command available?
function F.have(cmd) return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == 0 end

-- -- numbers as bytes --------------------------------------------------------------------

local function le(v, n)
  local r = {}
  for i = 1, n do
    r[i] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  return table.concat(r)
end
function F.u16(v) return le(v, 2) end
function F.u32(v) return le(v, 4) end
function F.u64(v) return le(v, 8) end
function F.be32(v) return le(v, 4):reverse() end

--- values packed as C type ctype ("float", "int16_t", ...), little-endian, or big-endian if big.
function F.pack(ctype, values, big)
  local n, size = #values, ffi.sizeof(ctype)
  local buf = ffi.new(ctype .. "[?]", math.max(n, 1))
  for i = 1, n do buf[i - 1] = values[i] end
  local s = ffi.string(buf, n * size)
  if not big then return s end
  local r = {}
  for i = 1, n do r[i] = s:sub((i - 1) * size + 1, i * size):reverse() end
  return table.concat(r)
end

--- s with byte i (1-based) replaced by the byte value b.
function F.poke(s, i, b) return s:sub(1, i - 1) .. string.char(b) .. s:sub(i + 1) end

-- -- zlib ---------------------------------------------------------------------------------

function F.crc32(s) return tonumber(Z.crc32(0, s, #s)) end

--- Raw deflate data (what a zip entry holds): zlib's stream without its
-- 2-byte header and 4-byte Adler-32 trailer.
function F.deflate(s)
  local len = ffi.new("unsigned long[1]", Z.compressBound(#s))
  local out = ffi.new("unsigned char[?]", len[0])
  assert(Z.compress2(out, len, s, #s, 9) == 0)
  return ffi.string(out, len[0]):sub(3, -5)
end

--- Writes s gzip'd to path.
function F.gzip(path, s)
  local gz = Z.gzopen(path, "wb")
  assert(gz ~= nil)
  assert(Z.gzwrite(gz, s, #s) == #s)
  assert(Z.gzclose(gz) == 0)
  return path
end

--- A zip archive of entries { name, data, method (0 stored, 8 deflated),
-- comp (optional: the compressed bytes as given), flags }, built from the
-- format's description. opts.zip64: every size and offset goes through
-- zip64 extra fields and the zip64 end records (numpy's savez forces zip64
-- local headers the same way).
function F.zip(entries, opts)
  opts = opts or {}
  local z64 = opts.zip64
  local body, central, offset = {}, {}, 0
  for _, e in ipairs(entries) do
    local crc = F.crc32(e.data)
    local comp = e.comp or (e.method == 8 and F.deflate(e.data) or e.data)
    local u, c = #e.data, #comp
    local x_local = z64 and (F.u16(1) .. F.u16(16) .. F.u64(u) .. F.u64(c)) or ""
    local lh = "PK\3\4" .. F.u16(z64 and 45 or 20) .. F.u16(e.flags or 0) .. F.u16(e.method) .. F.u16(0) .. F.u16(0)
      .. F.u32(crc) .. F.u32(z64 and 0xFFFFFFFF or c) .. F.u32(z64 and 0xFFFFFFFF or u)
      .. F.u16(#e.name) .. F.u16(#x_local) .. e.name .. x_local
    local x_central = z64 and (F.u16(1) .. F.u16(24) .. F.u64(u) .. F.u64(c) .. F.u64(offset)) or ""
    central[#central + 1] = "PK\1\2" .. F.u16(45) .. F.u16(z64 and 45 or 20) .. F.u16(e.flags or 0) .. F.u16(e.method)
      .. F.u16(0) .. F.u16(0) .. F.u32(crc) .. F.u32(z64 and 0xFFFFFFFF or c) .. F.u32(z64 and 0xFFFFFFFF or u)
      .. F.u16(#e.name) .. F.u16(#x_central) .. F.u16(0) .. F.u16(0) .. F.u16(0) .. F.u32(0)
      .. F.u32(z64 and 0xFFFFFFFF or offset) .. e.name .. x_central
    body[#body + 1] = lh .. comp
    offset = offset + #lh + #comp
  end
  local cd = table.concat(central)
  local n = #entries
  local tail = ""
  if z64 then
    local end64_at = offset + #cd
    tail = "PK\6\6" .. F.u64(44) .. F.u16(45) .. F.u16(45) .. F.u32(0) .. F.u32(0) .. F.u64(n) .. F.u64(n)
      .. F.u64(#cd) .. F.u64(offset)
      .. "PK\6\7" .. F.u32(0) .. F.u64(end64_at) .. F.u32(1)
  end
  local comment = opts.comment or ""
  local eocd = "PK\5\6" .. F.u16(0) .. F.u16(0) .. F.u16(z64 and 0xFFFF or n) .. F.u16(z64 and 0xFFFF or n)
    .. F.u32(z64 and 0xFFFFFFFF or #cd) .. F.u32(z64 and 0xFFFFFFFF or offset) .. F.u16(#comment) .. comment
  return table.concat(body) .. cd .. tail .. eocd
end

--- An .npy file: header dict for descr, shape (a Python tuple's text) and
-- fortran order, padded as numpy pads it, then data. version 1 or 2.
function F.npy(descr, shape, data, fortran, version)
  version = version or 1
  local dict = string.format("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
    fortran and "True" or "False", shape)
  local pre = version == 1 and 10 or 12
  local pad = (64 - (pre + #dict + 1) % 64) % 64
  dict = dict .. string.rep(" ", pad) .. "\n"
  local len = version == 1 and F.u16(#dict) or F.u32(#dict)
  return "\147NUMPY" .. string.char(version, 0) .. len .. dict .. data
end

return F
