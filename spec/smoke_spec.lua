local tide = require "tide"
local H = require "spec.helpers"
describe("smoke", function()
  it("adds", function()
    H.equal(tide.tensor({1, 2}) + 1, {2, 3})
    for name, t in pairs(H.layouts(tide.tensor({{1, 2}, {3, 4}}))) do H.equal(t + t, {{2, 4}, {6, 8}}, name) end
  end)
end)
