--- spec/helpers/guard.lua: loaded before the suite (.busted's helper). The
-- suite also runs with TIDE_DEFAULT_DEVICE=cpu:1 and cuda:0 (make test-specs):
-- a spec file that changes the default device and leaves it changed makes
-- every later file run somewhere else than the run says, and hides their
-- failures there. Such a file fails here, and the device is put back.
local busted = require "busted"
local tide = require "tide"

local initial = tide.get_default_device()

busted.subscribe({ "file", "end" }, function(file)
  local now = tide.get_default_device()
  if now ~= initial then
    tide.set_default_device(initial)
    error(("%s left the default device at %s (the run's is %s)"):format(file.name, now, initial))
  end
  return nil, true
end)
