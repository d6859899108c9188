-- gen_cdef.lua: writes cdef.lua, the ffi.cdef declarations of tide.h, so the
-- header stays the one source of truth for the binding. Drops comments, the
-- C++ guards and preprocessor lines; tide.h keeps its declarations in the
-- subset ffi.cdef parses, and this script fails the build when it does not.
-- usage: luajit gen_cdef.lua path/to/tide.h path/to/cdef.lua
local src, dst = arg[1], arg[2]
local f = assert(io.open(src, "rb"))
local text = f:read("*a")
f:close()
text = text:gsub("/%*.-%*/", ""):gsub("//[^\n]*", "")
text = text:gsub("#ifdef __cplusplus.-#endif", "")
local lines = {}
for line in text:gmatch("[^\n]*") do
  if not line:match("^%s*#") and not line:match("^%s*$") then
    lines[#lines + 1] = line
  end
end
local body = table.concat(lines, "\n")
require("ffi").cdef(body)   -- fails the build if ffi.cdef cannot parse the header
local out = assert(io.open(dst, "wb"))
out:write("-- generated from tide.h by bindings/gen_cdef.lua; do not edit\n")
out:write("return [[\n", body, "\n]]\n")
out:close()
